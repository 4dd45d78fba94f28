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
// Besides the float aggregates, a row has the aggregates of its int, bool
// and string values (typedColumns); count counts values of every type and
// the floats are count minus the typed counts, so rows of a table created
// before those columns existed, which Migrate adds in place, read as
// floats.
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
	"sync/atomic"
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

	// typedReady is set once the table is known to have the typed columns.
	typedReady atomic.Bool
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
    version     UInt64,
` + typedColumnsDDL() + `
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMMDD(minute)
ORDER BY (tenant, metric, device, minute, writer, part)`,
	}
}

// typedColumns are the columns of the typed (int, bool, string)
// aggregates, in table order, with their types. Tables created before they
// existed get them from Migrate (ALTER TABLE … ADD COLUMN); their
// defaults, zero counts, make the rows written before read as the float
// rows they are: a row's float values are count minus the typed counts.
// An int sum is int_sum + int_sum_hi × 2⁶⁴ (rollup.Int128.Split), so
// int_sum alone is the sum whenever it fits an Int64 (int_sum_hi is 0).
var typedColumns = [][2]string{
	{"int_count", "UInt64"}, {"int_sum", "Int64"}, {"int_sum_hi", "Int64"}, {"int_min", "Int64"}, {"int_max", "Int64"},
	{"int_first_ts", "Int64"}, {"int_first", "Int64"}, {"int_last_ts", "Int64"}, {"int_last", "Int64"},
	{"bool_count", "UInt64"}, {"bool_true", "UInt64"}, {"bool_first_ts", "Int64"}, {"bool_first", "UInt8"},
	{"bool_last_ts", "Int64"}, {"bool_last", "UInt8"},
	{"str_count", "UInt64"}, {"str_first_ts", "Int64"}, {"str_first", "String"}, {"str_last_ts", "Int64"}, {"str_last", "String"},
}

func typedColumnsDDL() string {
	var b strings.Builder
	for i, c := range typedColumns {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, "    %-13s %s", c[0], c[1])
	}
	return b.String()
}

func typedColumnNames() string {
	names := make([]string, len(typedColumns))
	for i, c := range typedColumns {
		names[i] = c[0]
	}
	return strings.Join(names, ", ")
}

// Migrate creates the database and tables if they do not exist, and adds
// the columns a table created by an earlier version lacks. It returns the
// statements it ran. It is idempotent, and two gateways may run it at once:
// ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, so it adds each missing
// column alone and, should that fail, succeeds if the column is there now
// (another gateway added it).
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	major, minor, err := s.ServerVersion(ctx)
	if err != nil {
		return nil, err
	}
	stmts := s.Schema(major, minor)
	for _, q := range stmts {
		if err := s.exec(ctx, q); err != nil {
			return nil, fmt.Errorf("migrate clickhouse: %s: %w", firstLine(q), err)
		}
	}
	added, err := s.addTypedColumns(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate clickhouse: %w", err)
	}
	stmts = append(stmts, added...)
	s.logger.Info("clickhouse schema ready", "addr", s.cfg.Addr, "table", s.table, "server_version", fmt.Sprintf("%d.%d", major, minor))
	return stmts, nil
}

// addTypedColumns adds the typed columns the table lacks and returns the
// statements it ran. With no table (the database is not migrated) it does
// nothing: the statement that needs the table says so.
func (s *Store) addTypedColumns(ctx context.Context) ([]string, error) {
	have, err := s.columnNames(ctx)
	if err != nil {
		return nil, err
	}
	if len(have) == 0 {
		return nil, nil
	}
	var stmts []string
	for _, c := range typedColumns {
		if have[c[0]] {
			continue
		}
		q := fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s DEFAULT %s", s.table, c[0], c[1], zeroOf(c[1]))
		if err := s.addColumn(ctx, q, c[0]); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		stmts = append(stmts, q)
		s.logger.Info("clickhouse column added", "table", s.table, "column", c[0])
	}
	s.typedReady.Store(true)
	return stmts, nil
}

// ensureTyped makes sure, once per Store, that the table has the typed
// columns before a statement uses them: a gateway upgraded without `ingest
// migrate` migrates the table in place when it first reads rollups or
// inserts typed ones (an insert of float rows needs no new column).
func (s *Store) ensureTyped(ctx context.Context) error {
	if s.typedReady.Load() {
		return nil
	}
	if _, err := s.addTypedColumns(ctx); err != nil {
		return fmt.Errorf("add the typed rollup columns to %s: %w", s.table, err)
	}
	return nil
}

// addColumn runs q, which adds column name, and succeeds if name is there
// afterwards: another gateway migrating at once may add it first (q then
// fails), or hold the table while it does (q is then tried again, up to
// five times).
func (s *Store) addColumn(ctx context.Context, q, name string) error {
	var err error
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return errors.Join(err, ctx.Err())
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
		if err = s.exec(ctx, q); err == nil {
			return nil
		}
		if have, cerr := s.columnNames(ctx); cerr == nil && have[name] {
			return nil
		}
	}
	return err
}

func zeroOf(typ string) string {
	if typ == "String" {
		return "''"
	}
	return "0"
}

func (s *Store) exec(ctx context.Context, q string) error {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	return s.conn.Exec(ctx, q)
}

// columnNames returns the names of the minute table's columns.
func (s *Store) columnNames(ctx context.Context) (map[string]bool, error) {
	db, table, _ := strings.Cut(s.table, ".")
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	rows, err := s.conn.Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ?", db, table)
	if err != nil {
		return nil, fmt.Errorf("list the columns of %s: %w", s.table, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list the columns of %s: %w", s.table, err)
		}
		out[n] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the columns of %s: %w", s.table, err)
	}
	return out, nil
}

func firstLine(q string) string {
	l, _, _ := strings.Cut(q, "\n")
	return l
}

// floatColumns are the columns of a row without typed values; columns
// adds the typed ones.
const floatColumns = "tenant, device, metric, minute, writer, part, count, sum, min, max, first_ts, first_value, last_ts, last_value, version"

var columns = floatColumns + ", " + typedColumnNames()

// appendRow appends r to b: the values of columns, or with typed false of
// floatColumns.
func appendRow(b driver.Batch, r *rollup.Row, typed bool) error {
	minute := time.UnixMilli(r.Minute).UTC()
	if !typed {
		return b.Append(r.Tenant, r.Device, r.Metric, minute, r.Writer, r.Part, r.Count,
			r.Sum, r.Min, r.Max, r.FirstTS, r.FirstValue, r.LastTS, r.LastValue, r.Version)
	}
	lo, hi := r.IntSum.Split()
	return b.Append(r.Tenant, r.Device, r.Metric, minute, r.Writer, r.Part, r.Count,
		r.Sum, r.Min, r.Max, r.FirstTS, r.FirstValue, r.LastTS, r.LastValue, r.Version,
		r.IntCount, lo, hi, r.IntMin, r.IntMax, r.IntFirstTS, r.IntFirst, r.IntLastTS, r.IntLast,
		r.BoolCount, r.TrueCount, r.BoolFirstTS, boolByte(r.BoolFirst), r.BoolLastTS, boolByte(r.BoolLast),
		r.StrCount, r.StrFirstTS, r.StrFirst, r.StrLastTS, r.StrLast)
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Insert writes rows in one INSERT. Inserting a row again, or an older
// version of it, changes nothing once parts merge, and nothing FINAL sees.
func (s *Store) Insert(ctx context.Context, rows []rollup.Row) error {
	if len(rows) == 0 {
		return nil
	}
	// A batch of float rows leaves the typed columns to their defaults:
	// 20 columns fewer to send, which halves the cost of an insert.
	typed, cols := rollup.AnyTyped(rows), floatColumns
	if typed {
		cols = columns
		if err := s.ensureTyped(ctx); err != nil {
			return fmt.Errorf("insert %d rollup rows: %w", len(rows), err)
		}
	}
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table+" ("+cols+")")
	if err != nil {
		return fmt.Errorf("insert %d rollup rows: %w", len(rows), err)
	}
	for i := range rows {
		if err := appendRow(b, &rows[i], typed); err != nil {
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
	if q.DeviceFrom != "" {
		w += " AND device >= ?"
		args = append(args, q.DeviceFrom)
	}
	if q.DeviceTo != "" {
		w += " AND device < ?"
		args = append(args, q.DeviceTo)
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

// aggregates folds the rows of a group into one rollup.Bucket, as
// rollup.Bucket.Merge does, each type apart: a row's float aggregates
// count only if it has float values (count above its typed counts). The
// int sum is added exactly: each row's int_sum is split into its high and
// low 32 bits (as unsigned), whose sums cannot overflow, with the number
// of negative ones and the sum of int_sum_hi (see scanBucket).
const aggregates = `sum(count), sum(sum), minIf(min, fl), maxIf(max, fl),
    minIf(first_ts, fl), argMinIf(first_value, first_ts, fl), maxIf(last_ts, fl), argMaxIf(last_value, last_ts, fl),
    sum(int_count), sum(int_sum_hi), sum(bitShiftRight(toUInt64(int_sum), 32)), sum(bitAnd(toUInt64(int_sum), 4294967295)),
    countIf(int_sum < 0), minIf(int_min, int_count > 0), maxIf(int_max, int_count > 0),
    minIf(int_first_ts, int_count > 0), argMinIf(int_first, int_first_ts, int_count > 0),
    maxIf(int_last_ts, int_count > 0), argMaxIf(int_last, int_last_ts, int_count > 0),
    sum(bool_count), sum(bool_true), minIf(bool_first_ts, bool_count > 0), argMinIf(bool_first, bool_first_ts, bool_count > 0),
    maxIf(bool_last_ts, bool_count > 0), argMaxIf(bool_last, bool_last_ts, bool_count > 0),
    sum(str_count), minIf(str_first_ts, str_count > 0), argMinIf(str_first, str_first_ts, str_count > 0),
    maxIf(str_last_ts, str_count > 0), argMaxIf(str_last, str_last_ts, str_count > 0)`

// live selects the latest version of every row that filter w selects,
// tombstones left out, with fl: whether the row has float values.
func (s *Store) live(w string) string {
	return fmt.Sprintf("(SELECT *, count > int_count + bool_count + str_count AS fl FROM %s FINAL WHERE %s) WHERE count > 0", s.table, w)
}

// scanBucket scans the columns of aggregates, after the targets before,
// into a bucket.
func scanBucket(rows driver.Rows, b *rollup.Bucket, before ...any) error {
	var hi int64
	var upper, lower, neg uint64
	var bf, bl uint8
	err := rows.Scan(append(before, &b.Count, &b.Sum, &b.Min, &b.Max, &b.FirstTS, &b.FirstValue, &b.LastTS, &b.LastValue,
		&b.IntCount, &hi, &upper, &lower, &neg, &b.IntMin, &b.IntMax, &b.IntFirstTS, &b.IntFirst, &b.IntLastTS, &b.IntLast,
		&b.BoolCount, &b.TrueCount, &b.BoolFirstTS, &bf, &b.BoolLastTS, &bl,
		&b.StrCount, &b.StrFirstTS, &b.StrFirst, &b.StrLastTS, &b.StrLast)...)
	if err != nil {
		return err
	}
	// The rows' int sums are Σ(int_sum_hi×2⁶⁴ + int_sum); each int_sum is
	// its unsigned reading less 2⁶⁴ when negative, and the unsigned
	// readings add up to upper×2³² + lower.
	b.IntSum = rollup.Int128{Hi: hi - int64(neg)}.
		Add(rollup.Int128{Hi: int64(upper >> 32), Lo: upper << 32}).
		Add(rollup.Int128{Lo: lower})
	b.BoolFirst, b.BoolLast = bf != 0, bl != 0
	return nil
}

// Series returns the buckets of one device's metric over the filter's
// range, folded to the step at query time.
func (s *Store) Series(ctx context.Context, q rollup.Filter, step rollup.Step) ([]rollup.Bucket, error) {
	if err := s.ensureTyped(ctx); err != nil {
		return nil, fmt.Errorf("read rollups of %q %q: %w", q.Device, q.Metric, err)
	}
	w, args := where(q)
	stepS := int64(step) / 1000
	query := fmt.Sprintf(`SELECT intDiv(toUInt32(minute), %d) * %d AS t, %s
FROM %s GROUP BY t ORDER BY t`, stepS, stepS, aggregates, s.live(w))
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
		if err := scanBucket(rows, &b, &t); err != nil {
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

// Top ranks the devices of a metric over the filter's range, as
// rollup.Top does: by max or mean only devices with numeric (float or
// int) values. The server orders by a float approximation of the exact
// int sums; the page is ordered again by the exact values.
func (s *Store) Top(ctx context.Context, q rollup.Filter, by rollup.By, limit int) ([]rollup.Rank, error) {
	if err := s.ensureTyped(ctx); err != nil {
		return nil, fmt.Errorf("rank devices by %s of %q: %w", by, q.Metric, err)
	}
	w, args := where(q)
	const (
		fc      = "sum(count - int_count - bool_count - str_count)"
		numeric = "(" + fc + " + sum(int_count))"
	)
	var order, having string
	switch by {
	case rollup.ByMax:
		order = "greatest(if(" + fc + " > 0, maxIf(max, fl), -inf), if(sum(int_count) > 0, toFloat64(maxIf(int_max, int_count > 0)), -inf))"
		having = "HAVING " + numeric + " > 0"
	case rollup.ByMean:
		order = "(sum(sum) + sum(toFloat64(int_sum) + toFloat64(int_sum_hi) * 18446744073709551616)) / " + numeric
		having = "HAVING " + numeric + " > 0"
	case rollup.ByCount:
		order = "sum(count)"
	default:
		return nil, fmt.Errorf("rank by %q: not one of max, mean, count", by)
	}
	query := fmt.Sprintf(`SELECT device, %s
FROM %s GROUP BY device %s ORDER BY %s DESC, device LIMIT %d`, aggregates, s.live(w), having, order, limit)
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
		if err := scanBucket(rows, &b, &d); err != nil {
			return nil, fmt.Errorf("rank devices by %s of %q: %w", by, q.Metric, err)
		}
		out = append(out, rollup.RankOf(d, b, by))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("rank devices by %s of %q: %w", by, q.Metric, err)
	}
	rollup.SortRanks(out)
	return out, nil
}

// Rows returns the latest version of every row in the filter's range,
// tombstones excluded (Metric may be empty: all metrics).
func (s *Store) Rows(ctx context.Context, q rollup.Filter) ([]rollup.Row, error) {
	if err := s.ensureTyped(ctx); err != nil {
		return nil, fmt.Errorf("read rollup rows: %w", err)
	}
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
		var lo, hi int64
		var bf, bl uint8
		if err := rows.Scan(&r.Tenant, &r.Device, &r.Metric, &m, &r.Writer, &r.Part, &r.Count, &r.Sum, &r.Min, &r.Max,
			&r.FirstTS, &r.FirstValue, &r.LastTS, &r.LastValue, &r.Version,
			&r.IntCount, &lo, &hi, &r.IntMin, &r.IntMax, &r.IntFirstTS, &r.IntFirst, &r.IntLastTS, &r.IntLast,
			&r.BoolCount, &r.TrueCount, &r.BoolFirstTS, &bf, &r.BoolLastTS, &bl,
			&r.StrCount, &r.StrFirstTS, &r.StrFirst, &r.StrLastTS, &r.StrLast); err != nil {
			return nil, fmt.Errorf("read rollup rows: %w", err)
		}
		r.Minute = m.UnixMilli()
		r.IntSum = rollup.JoinInt128(lo, hi)
		r.BoolFirst, r.BoolLast = bf != 0, bl != 0
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
