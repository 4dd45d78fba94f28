package cqlstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// Config is the store.cassandra section of the gateway configuration.
type Config struct {
	// Hosts are contact points, host or host:port (port 9042 when omitted).
	// The driver discovers the rest of the ring from them.
	Hosts    []string `mapstructure:"hosts"`
	Keyspace string   `mapstructure:"keyspace"`
	// LocalDC is the data centre whose nodes coordinate requests; the
	// others are used only when none of it is reachable.
	LocalDC  string `mapstructure:"local_dc"`
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	TLS      TLS    `mapstructure:"tls"`
	// Consistency levels by name (ONE, LOCAL_ONE, LOCAL_QUORUM, QUORUM,
	// EACH_QUORUM, ALL). A commit is acknowledged only after every write
	// reached WriteConsistency.
	WriteConsistency string        `mapstructure:"write_consistency"`
	ReadConsistency  string        `mapstructure:"read_consistency"`
	ConnectTimeout   time.Duration `mapstructure:"connect_timeout"`
	// Timeout bounds one request (one attempt) to a node.
	Timeout time.Duration `mapstructure:"timeout"`
	// Retries is how many times an idempotent request is retried on
	// another replica after a timeout or an unavailable error.
	Retries int `mapstructure:"retries"`
	// NumConns is the number of connections per node.
	NumConns int `mapstructure:"num_conns"`
	// MaxConcurrentRequests bounds the requests this gateway has in flight
	// to the cluster at once, over all commits and reads.
	MaxConcurrentRequests int `mapstructure:"max_concurrent_requests"`
	// BatchRows is the most rows one UNLOGGED single-partition batch holds;
	// a larger partition write is sent as several batches in parallel.
	BatchRows int `mapstructure:"batch_rows"`
	// Keyspace replication used by `ingest migrate`: SimpleStrategy or
	// NetworkTopologyStrategy (the factor then applies to every data centre).
	ReplicationClass  string `mapstructure:"replication_class"`
	ReplicationFactor int    `mapstructure:"replication_factor"`
}

// TLS configures encryption of client connections.
type TLS struct {
	Enabled            bool   `mapstructure:"enabled"`
	CAFile             string `mapstructure:"ca_file"`
	CertFile           string `mapstructure:"cert_file"`
	KeyFile            string `mapstructure:"key_file"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify"`
}

// DefaultConfig returns the defaults: a local node, LOCAL_QUORUM both ways,
// and a keyspace replicated three times in every data centre.
func DefaultConfig() Config {
	return Config{
		Hosts:                 []string{"127.0.0.1:9042"},
		Keyspace:              "sluice",
		LocalDC:               "datacenter1",
		WriteConsistency:      "LOCAL_QUORUM",
		ReadConsistency:       "LOCAL_QUORUM",
		ConnectTimeout:        10 * time.Second,
		Timeout:               10 * time.Second,
		Retries:               3,
		NumConns:              2,
		MaxConcurrentRequests: 128,
		BatchRows:             200,
		ReplicationClass:      "NetworkTopologyStrategy",
		ReplicationFactor:     3,
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,47}$`)

var consistencies = []string{"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"}

// Validate reports every bad setting, naming its key under store.cassandra.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("store.cassandra."+format, args...))
	}
	if len(c.Hosts) == 0 {
		bad("hosts: at least one host or host:port is required")
	}
	for i, h := range c.Hosts {
		if !validHost(h) {
			bad("hosts[%d]: %q is not a host or host:port", i, h)
		}
	}
	if !identRE.MatchString(c.Keyspace) {
		bad("keyspace: %q must be 1-48 characters of A-Z a-z 0-9 _, starting with a letter", c.Keyspace)
	}
	if c.LocalDC == "" {
		bad("local_dc: must name the data centre this gateway runs in (e.g. datacenter1)")
	}
	if (c.Username == "") != (c.Password == "") {
		bad("username/password: set both or neither")
	}
	for _, cl := range []struct{ key, v string }{{"write_consistency", c.WriteConsistency}, {"read_consistency", c.ReadConsistency}} {
		if !slices.Contains(consistencies, cl.v) {
			bad("%s: %q is not one of %s", cl.key, cl.v, strings.Join(consistencies, ", "))
		}
	}
	if c.WriteConsistency == "ANY" {
		bad("write_consistency: ANY acknowledges writes no replica holds; use LOCAL_QUORUM (or ONE, LOCAL_ONE)")
	}
	if c.ReadConsistency == "ANY" {
		bad("read_consistency: ANY is for writes only")
	}
	if c.ConnectTimeout <= 0 {
		bad("connect_timeout: must be a positive duration, got %s", c.ConnectTimeout)
	}
	if c.Timeout <= 0 {
		bad("timeout: must be a positive duration, got %s", c.Timeout)
	}
	if c.Retries < 0 || c.Retries > 10 {
		bad("retries: must be 0..10, got %d", c.Retries)
	}
	if c.NumConns < 1 || c.NumConns > 64 {
		bad("num_conns: must be 1..64, got %d", c.NumConns)
	}
	if c.MaxConcurrentRequests < 1 || c.MaxConcurrentRequests > 4096 {
		bad("max_concurrent_requests: must be 1..4096, got %d", c.MaxConcurrentRequests)
	}
	if c.BatchRows < 1 || c.BatchRows > 5000 {
		bad("batch_rows: must be 1..5000, got %d", c.BatchRows)
	}
	if c.ReplicationClass != "SimpleStrategy" && c.ReplicationClass != "NetworkTopologyStrategy" {
		bad("replication_class: %q is not SimpleStrategy or NetworkTopologyStrategy", c.ReplicationClass)
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > 15 {
		bad("replication_factor: must be 1..15, got %d", c.ReplicationFactor)
	}
	if !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.CertFile != "" || c.TLS.KeyFile != "" || c.TLS.InsecureSkipVerify) {
		bad("tls.enabled: TLS files or options are set but tls.enabled is false")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("tls.cert_file/tls.key_file: set both (client certificate) or neither")
	}
	return errors.Join(errs...)
}

func validHost(h string) bool {
	if h == "" || strings.ContainsAny(h, " ,/") {
		return false
	}
	if !strings.Contains(h, ":") || (strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "[")) {
		return true // a name or an IPv6 address without port
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil || host == "" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536
}

// replication renders the keyspace replication map.
func (c Config) replication() string {
	if c.ReplicationClass == "SimpleStrategy" {
		return fmt.Sprintf("{'class': 'SimpleStrategy', 'replication_factor': %d}", c.ReplicationFactor)
	}
	// Since Cassandra 4.0 (and in ScyllaDB), replication_factor under
	// NetworkTopologyStrategy means that factor in every data centre.
	return fmt.Sprintf("{'class': 'NetworkTopologyStrategy', 'replication_factor': %d}", c.ReplicationFactor)
}

// cluster builds the driver configuration. keyspace may be empty (for
// migrations, before the keyspace exists).
func (c Config) cluster(keyspace string) *gocql.ClusterConfig {
	cc := gocql.NewCluster(c.Hosts...)
	cc.Keyspace = keyspace
	cc.Consistency = gocql.ParseConsistency(c.WriteConsistency)
	cc.ConnectTimeout = c.ConnectTimeout
	cc.Timeout = c.Timeout
	cc.WriteTimeout = c.Timeout
	cc.NumConns = c.NumConns
	// Token-aware routing sends each statement to a replica of its
	// partition; among them, and as the fallback, nodes of the local DC
	// come first.
	cc.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.DCAwareRoundRobinPolicy(c.LocalDC), gocql.ShuffleReplicas())
	// Every statement Sluice sends is an idempotent upsert or read (no
	// counters, no list appends, no LWT), so each may be retried.
	cc.DefaultIdempotence = true
	cc.RetryPolicy = &gocql.ExponentialBackoffRetryPolicy{NumRetries: c.Retries, Min: 50 * time.Millisecond, Max: 2 * time.Second}
	cc.ReconnectionPolicy = &gocql.ExponentialReconnectionPolicy{MaxRetries: 10, InitialInterval: 500 * time.Millisecond, MaxInterval: 10 * time.Second}
	if c.Username != "" {
		cc.Authenticator = gocql.PasswordAuthenticator{Username: c.Username, Password: c.Password}
	}
	if c.TLS.Enabled {
		cc.SslOpts = &gocql.SslOptions{
			Config:                 &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.TLS.InsecureSkipVerify}, //nolint:gosec // opt-in, documented
			CaPath:                 c.TLS.CAFile,
			CertPath:               c.TLS.CertFile,
			KeyPath:                c.TLS.KeyFile,
			EnableHostVerification: !c.TLS.InsecureSkipVerify,
		}
	}
	return cc
}
