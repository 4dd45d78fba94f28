// Package chstore keeps minute rollups in ClickHouse, over the native
// protocol (github.com/ClickHouse/clickhouse-go/v2), and answers the
// analysts' queries from them.
//
// # Tables
//
// One table, rollups_1m, a ReplacingMergeTree versioned by `version` and
// ordered by (tenant, metric, device, minute, writer, part): each row is one
// partial aggregate (see package rollup), and a re-emitted or retried row
// replaces the older version of itself when parts merge. Reads use FINAL
// (only on key columns inside, so nothing is filtered before replacement)
// and then skip tombstones (count = 0). It is partitioned by
// toYYYYMMDD(minute): retention drops whole days with DROP PARTITION.
//
// Hours and days are aggregated at query time from the minute table, not
// kept by materialized views: a view sees every inserted version of a row
// and cannot take the replaced one back out, so an hourly
// Summing/AggregatingMergeTree would double-count every re-emission and
// every retried insert. A device-metric-day is 1,440 minute rows at most per
// part, cheap to fold at query time.
//
// Everything in the required path works on ClickHouse 18.16 (explicit column
// lists in INSERT, no DateTime64, no LowCardinality, no TTL). On 20.1 and
// later, migrate declares tenant and metric LowCardinality(String).
//
// The package never writes anything but rollup rows and never runs a
// statement it did not build, except SQL, which runs with readonly=1.
package chstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/rollup"
)

// Config says how to reach ClickHouse. An empty Addr means "not configured".
type Config struct {
	Addr                  string        `mapstructure:"addr"`
	Database              string        `mapstructure:"database"`
	Username              string        `mapstructure:"username"`
	Password              string        `mapstructure:"password"`
	TLS                   bool          `mapstructure:"tls"`
	TLSInsecureSkipVerify bool          `mapstructure:"tls_insecure_skip_verify"`
	DialTimeout           time.Duration `mapstructure:"dial_timeout"`
	QueryTimeout          time.Duration `mapstructure:"query_timeout"`
}

// DefaultConfig leaves ClickHouse unconfigured.
func DefaultConfig() Config {
	return Config{Database: "sluice", Username: "default", DialTimeout: 5 * time.Second, QueryTimeout: 30 * time.Second}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Validate reports bad settings; prefix names the config section.
func (c Config) Validate(prefix string) error {
	var errs []error
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			errs = append(errs, fmt.Errorf("%saddr: %q is not host:port (e.g. 127.0.0.1:9000, the native protocol port)", prefix, c.Addr))
		}
	}
	if !identRE.MatchString(c.Database) {
		errs = append(errs, fmt.Errorf("%sdatabase: %q must be 1-63 characters of A-Z a-z 0-9 _, not starting with a digit", prefix, c.Database))
	}
	if c.Username == "" {
		errs = append(errs, fmt.Errorf("%susername: must not be empty", prefix))
	}
	if c.TLSInsecureSkipVerify && !c.TLS {
		errs = append(errs, fmt.Errorf("%stls_insecure_skip_verify: only meaningful with %stls: true", prefix, prefix))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%sdial_timeout: must be a positive duration, got %s", prefix, c.DialTimeout))
	}
	if c.QueryTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%squery_timeout: must be a positive duration, got %s", prefix, c.QueryTimeout))
	}
	return errors.Join(errs...)
}

// Store is a ClickHouse connection pool for rollups. Safe for concurrent use.
type Store struct {
	cfg    Config
	conn   driver.Conn
	logger *slog.Logger
	table  string

	mu      sync.Mutex
	version [2]int // major, minor; zero until known
}

// Open prepares a connection pool. It does not dial: the gateway starts and
// ingests while ClickHouse is down; the first call that needs the server
// dials it.
func Open(cfg Config, logger *slog.Logger) (*Store, error) {
	opts := &clickhouse.Options{
		Addr:         []string{cfg.Addr},
		Auth:         clickhouse.Auth{Database: "default", Username: cfg.Username, Password: cfg.Password},
		DialTimeout:  cfg.DialTimeout,
		ReadTimeout:  cfg.QueryTimeout,
		MaxOpenConns: 4,
		MaxIdleConns: 2,
		ClientInfo:   clickhouse.ClientInfo{Products: []struct{ Name, Version string }{{Name: "sluice", Version: "1"}}},
	}
	if cfg.TLS {
		opts.TLS = &tls.Config{InsecureSkipVerify: cfg.TLSInsecureSkipVerify} //nolint:gosec // opt-in by configuration
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %s: %w", cfg.Addr, err)
	}
	return &Store{cfg: cfg, conn: conn, logger: logger, table: cfg.Database + ".rollups_1m"}, nil
}

// Close closes the pool.
func (s *Store) Close() error { return s.conn.Close() }

// Table is the qualified name of the minute table.
func (s *Store) Table() string { return s.table }

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.QueryTimeout)
}

// ServerVersion returns the server's major and minor version, asking once.
func (s *Store) ServerVersion(ctx context.Context) (major, minor int, err error) {
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	if v[0] != 0 {
		return v[0], v[1], nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	var text string
	if err := s.conn.QueryRow(ctx, "SELECT version()").Scan(&text); err != nil {
		return 0, 0, fmt.Errorf("ask clickhouse %s for its version: %w", s.cfg.Addr, err)
	}
	major, minor, err = parseVersion(text)
	if err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	s.version = [2]int{major, minor}
	s.mu.Unlock()
	return major, minor, nil
}

func parseVersion(text string) (int, int, error) {
	parts := strings.SplitN(text, ".", 3)
	if len(parts) < 2 {
		return 0, 0, fmt.Errorf("clickhouse version %q: want MAJOR.MINOR.PATCH", text)
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major < 1 {
		return 0, 0, fmt.Errorf("clickhouse version %q: want MAJOR.MINOR.PATCH", text)
	}
	return major, minor, nil
}

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	if err := s.conn.Ping(ctx); err != nil {
		return fmt.Errorf("ping clickhouse %s: %w", s.cfg.Addr, err)
	}
	return nil
}

// Schema returns the statements that create the database and the minute
// table on a server of the given version.
func (s *Store) Schema(major, minor int) []string {
	str := "String"
	if major > 20 || major == 20 && minor >= 1 {
		str = "LowCardinality(String)"
	}
	return []string{
		"CREATE DATABASE IF NOT EXISTS " + s.cfg.Database,
		`CREATE TABLE IF NOT EXISTS ` + s.table + ` (
    tenant      ` + str + `,
    device      String,
    metric      ` + str + `,
    minute      DateTime,
    writer      UInt16,
    part        UInt64,
    count       UInt64,
    sum         Float64,
    min         Float64,
    max         Float64,
    first_ts    Int64,
    first_value Float64,
    last_ts     Int64,
    last_value  Float64,
    version     UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(minute)
ORDER BY (tenant, metric, device, minute, writer, part)`,
	}
}

// Migrate creates the database and tables if they do not exist. It returns
// the statements it ran.
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	major, minor, err := s.ServerVersion(ctx)
	if err != nil {
		return nil, err
	}
	stmts := s.Schema(major, minor)
	for _, q := range stmts {
		qctx, cancel := s.ctx(ctx)
		err := s.conn.Exec(qctx, q)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("migrate clickhouse: %s: %w", firstLine(q), err)
		}
	}
	s.logger.Info("clickhouse schema ready", "addr", s.cfg.Addr, "table", s.table, "server_version", fmt.Sprintf("%d.%d", major, minor))
	return stmts, nil
}

func firstLine(q string) string {
	l, _, _ := strings.Cut(q, "\n")
	return l
}

const columns = "tenant, device, metric, minute, writer, part, count, sum, min, max, first_ts, first_value, last_ts, last_value, version"

// Insert writes rows in one INSERT. Inserting a row again, or an older
// version of it, changes nothing once parts merge, and nothing FINAL sees.
func (s *Store) Insert(ctx context.Context, rows []rollup.Row) error {
	if len(rows) == 0 {
		return nil
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table+" ("+columns+")")
	if err != nil {
		return fmt.Errorf("insert %d rollup rows: %w", len(rows), err)
	}
	for _, r := range rows {
		if err := b.Append(r.Tenant, r.Device, r.Metric, time.UnixMilli(r.Minute).UTC(), r.Writer, r.Part, r.Count,
			r.Sum, r.Min, r.Max, r.FirstTS, r.FirstValue, r.LastTS, r.LastValue, r.Version); err != nil {
			_ = b.Abort()
			return fmt.Errorf("insert %d rollup rows: %w", len(rows), err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("insert %d rollup rows: %w", len(rows), err)
	}
	return nil
}

// where builds the key-column filter of a read; device may be empty.
func where(q rollup.Filter) (string, []any) {
	w := "tenant = ? AND metric = ? AND minute >= toDateTime(?) AND minute < toDateTime(?)"
	args := []any{q.Tenant, q.Metric, secondsFloor(q.From), secondsCeil(q.To)}
	if q.Metric == "" {
		w = "tenant = ? AND minute >= toDateTime(?) AND minute < toDateTime(?)"
		args = []any{q.Tenant, secondsFloor(q.From), secondsCeil(q.To)}
	}
	if q.Device != "" {
		w += " AND device = ?"
		args = append(args, q.Device)
	}
	return w, args
}

// Minutes start on whole seconds, so a range in ms maps to seconds exactly
// when rounded outwards to the minutes it touches.
func secondsFloor(ms int64) int64 { return rollup.MinuteOf(ms) / 1000 }
func secondsCeil(ms int64) int64 {
	m := rollup.MinuteOf(ms)
	if m < ms {
		m += rollup.MinuteMillis
	}
	return m / 1000
}

// Series returns the buckets of one device's metric over the filter's
// range, folded to the step at query time.
func (s *Store) Series(ctx context.Context, q rollup.Filter, step rollup.Step) ([]rollup.Bucket, error) {
	w, args := where(q)
	stepS := int64(step) / 1000
	query := fmt.Sprintf(`SELECT intDiv(toUInt32(minute), %d) * %d AS t, sum(count), sum(sum), min(min), max(max),
    min(first_ts), argMin(first_value, first_ts), max(last_ts), argMax(last_value, last_ts)
FROM (SELECT * FROM %s FINAL WHERE %s)
WHERE count > 0 GROUP BY t ORDER BY t`, stepS, stepS, s.table, w)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read rollups of %q %q: %w", q.Device, q.Metric, err)
	}
	defer rows.Close()
	var out []rollup.Bucket
	for rows.Next() {
		var b rollup.Bucket
		var t uint64
		if err := rows.Scan(&t, &b.Count, &b.Sum, &b.Min, &b.Max, &b.FirstTS, &b.FirstValue, &b.LastTS, &b.LastValue); err != nil {
			return nil, fmt.Errorf("read rollups of %q %q: %w", q.Device, q.Metric, err)
		}
		b.Start = int64(t) * 1000
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rollups of %q %q: %w", q.Device, q.Metric, err)
	}
	return out, nil
}

// Top ranks the devices of a metric over the filter's range.
func (s *Store) Top(ctx context.Context, q rollup.Filter, by rollup.By, limit int) ([]rollup.Rank, error) {
	w, args := where(q)
	var order string
	switch by {
	case rollup.ByMax:
		order = "mx"
	case rollup.ByMean:
		order = "s / c"
	case rollup.ByCount:
		order = "c"
	default:
		return nil, fmt.Errorf("rank by %q: not one of max, mean, count", by)
	}
	query := fmt.Sprintf(`SELECT device, sum(count) AS c, sum(sum) AS s, max(max) AS mx
FROM (SELECT * FROM %s FINAL WHERE %s)
WHERE count > 0 GROUP BY device ORDER BY %s DESC, device LIMIT %d`, s.table, w, order, limit)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("rank devices by %s of %q: %w", by, q.Metric, err)
	}
	defer rows.Close()
	var out []rollup.Rank
	for rows.Next() {
		var d string
		var b rollup.Bucket
		if err := rows.Scan(&d, &b.Count, &b.Sum, &b.Max); err != nil {
			return nil, fmt.Errorf("rank devices by %s of %q: %w", by, q.Metric, err)
		}
		out = append(out, rollup.RankOf(d, b, by))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rank devices by %s of %q: %w", by, q.Metric, err)
	}
	return out, nil
}

// Rows returns the latest version of every row in the filter's range,
// tombstones excluded (Metric may be empty: all metrics).
func (s *Store) Rows(ctx context.Context, q rollup.Filter) ([]rollup.Row, error) {
	w, args := where(q)
	query := fmt.Sprintf(`SELECT %s FROM (SELECT * FROM %s FINAL WHERE %s) WHERE count > 0`, columns, s.table, w)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("read rollup rows: %w", err)
	}
	defer rows.Close()
	var out []rollup.Row
	for rows.Next() {
		var r rollup.Row
		var m time.Time
		if err := rows.Scan(&r.Tenant, &r.Device, &r.Metric, &m, &r.Writer, &r.Part, &r.Count, &r.Sum, &r.Min, &r.Max,
			&r.FirstTS, &r.FirstValue, &r.LastTS, &r.LastValue, &r.Version); err != nil {
			return nil, fmt.Errorf("read rollup rows: %w", err)
		}
		r.Minute = m.UnixMilli()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read rollup rows: %w", err)
	}
	return out, nil
}

// Devices lists, sorted, the devices of tenant with live rollup rows on
// day.
func (s *Store) Devices(ctx context.Context, tenant string, day model.Day) ([]string, error) {
	w, args := where(rollup.Filter{Tenant: tenant, From: day.Start(), To: day.End()})
	query := fmt.Sprintf(`SELECT DISTINCT device FROM (SELECT * FROM %s FINAL WHERE %s) WHERE count > 0 ORDER BY device`, s.table, w)
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list devices with rollups: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var d string
		if err := rows.Scan(&d); err != nil {
			return nil, fmt.Errorf("list devices with rollups: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list devices with rollups: %w", err)
	}
	return out, nil
}

// DropDay drops the partition of one UTC day: what retention does.
func (s *Store) DropDay(ctx context.Context, d model.Day) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	id := strings.ReplaceAll(d.String(), "-", "")
	if err := s.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP PARTITION %s", s.table, id)); err != nil {
		return fmt.Errorf("drop rollups of %s: %w", d, err)
	}
	return nil
}

// Result is the answer to a pass-through query, every value as text.
type Result struct {
	Columns []string
	Types   []string
	Rows    [][]string
}

// ErrNotSelect is returned by SQL for a statement that is not a query.
var ErrNotSelect = errors.New("only SELECT (or WITH ... SELECT) queries are allowed")

// CheckReadOnly rejects anything but one SELECT statement. ClickHouse's
// readonly=1 is the real guard; this gives a clear message first.
func CheckReadOnly(q string) error {
	t := strings.TrimSpace(stripComments(q))
	t = strings.TrimSuffix(t, ";")
	if strings.Contains(t, ";") {
		return fmt.Errorf("%w: one statement only", ErrNotSelect)
	}
	t = strings.TrimLeft(t, "( \t\r\n")
	end := strings.IndexFunc(t, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') })
	if end < 0 {
		end = len(t)
	}
	word := strings.ToUpper(t[:end])
	if word == "" {
		return fmt.Errorf("%w: the query is empty", ErrNotSelect)
	}
	if word != "SELECT" && word != "WITH" {
		return fmt.Errorf("%w: got %s", ErrNotSelect, word)
	}
	return nil
}

func stripComments(q string) string {
	var b strings.Builder
	for len(q) > 0 {
		switch {
		case strings.HasPrefix(q, "--"):
			i := strings.IndexByte(q, '\n')
			if i < 0 {
				return b.String()
			}
			q = q[i:]
		case strings.HasPrefix(q, "/*"):
			i := strings.Index(q, "*/")
			if i < 0 {
				return b.String()
			}
			q = q[i+2:]
			b.WriteByte(' ')
		default:
			b.WriteByte(q[0])
			q = q[1:]
		}
	}
	return b.String()
}

// SQL runs a read-only query (readonly=1) and returns at most maxRows rows.
func (s *Store) SQL(ctx context.Context, query string, maxRows int) (*Result, error) {
	if err := CheckReadOnly(query); err != nil {
		return nil, err
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"readonly": 1}))
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("run query: %w", err)
	}
	defer rows.Close()
	res := &Result{Columns: rows.Columns()}
	types := rows.ColumnTypes()
	for _, ct := range types {
		res.Types = append(res.Types, ct.DatabaseTypeName())
	}
	for rows.Next() {
		if len(res.Rows) == maxRows {
			return res, fmt.Errorf("run query: more than %d rows; add a LIMIT", maxRows)
		}
		vals := make([]any, len(types))
		for i, ct := range types {
			vals[i] = newScanTarget(ct)
		}
		if err := rows.Scan(vals...); err != nil {
			return nil, fmt.Errorf("run query: %w", err)
		}
		line := make([]string, len(vals))
		for i, v := range vals {
			line[i] = formatValue(v)
		}
		res.Rows = append(res.Rows, line)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("run query: %w", err)
	}
	return res, nil
}

func newScanTarget(ct driver.ColumnType) any {
	return reflect.New(ct.ScanType()).Interface()
}

func deref(v any) any {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	return rv.Interface()
}

func formatValue(v any) string {
	x := deref(v)
	switch t := x.(type) {
	case nil:
		return "NULL"
	case time.Time:
		return t.UTC().Format("2006-01-02 15:04:05")
	case float64:
		return formatFloat(t)
	case float32:
		return formatFloat(float64(t))
	case string:
		return t
	}
	return fmt.Sprint(x)
}

func formatFloat(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Sprint(f)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
