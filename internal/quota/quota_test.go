package quota

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// clock is a fake clock; sleep advances it instead of waiting.
type clock struct {
	mu     sync.Mutex
	t      time.Time
	slept  []time.Duration
	cancel bool // sleep fails as if its context ended, without advancing
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *clock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel {
		return context.Canceled
	}
	c.slept = append(c.slept, d)
	c.t = c.t.Add(d)
	return ctx.Err()
}

func newTest(t *testing.T, cfg Config, named ...string) (*Quotas, *clock) {
	t.Helper()
	if err := cfg.Validate(Bounds{Rows: Bound{"limits.max_rows", 1}, Bytes: Bound{"http.max_body_bytes", 1}}); err != nil {
		t.Fatal(err)
	}
	c := newClock()
	q := New(cfg, named, c.now, prometheus.NewRegistry())
	q.sleep = c.sleep
	return q, c
}

func ptr(n int64) *int64 { return &n }

// A step takes rows or bytes after the clock advanced, and expects either
// success or a refusal naming the quota with a Retry-After.
type step struct {
	advance   time.Duration
	tenant    string
	rows      int64
	bytes     int64
	wantQuota string // "" for success
	wantRetry time.Duration
}

func TestTake(t *testing.T) {
	cfg := Config{
		Default: Limits{RowsPerSecond: 100, RowBurst: 300, BytesPerSecond: 1000},
		Tenants: []Override{
			{Tenant: "free", RowsPerSecond: ptr(0), BytesPerSecond: ptr(0)},
			{Tenant: "small", RowsPerSecond: ptr(10), RowBurst: ptr(20)},
		},
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "burst then refused until refilled", steps: []step{
			{tenant: "a", rows: 300},
			{tenant: "a", rows: 1, wantQuota: QuotaRows, wantRetry: 10 * time.Millisecond},
			{advance: 10 * time.Millisecond, tenant: "a", rows: 1},
			{tenant: "a", rows: 50, wantQuota: QuotaRows, wantRetry: 500 * time.Millisecond},
			{advance: 499 * time.Millisecond, tenant: "a", rows: 50, wantQuota: QuotaRows, wantRetry: time.Millisecond},
			{advance: time.Millisecond, tenant: "a", rows: 50},
		}},
		{name: "a refusal takes nothing", steps: []step{
			{tenant: "a", rows: 250},
			{tenant: "a", rows: 100, wantQuota: QuotaRows, wantRetry: 500 * time.Millisecond},
			{tenant: "a", rows: 100, wantQuota: QuotaRows, wantRetry: 500 * time.Millisecond},
			{tenant: "a", rows: 50},
		}},
		{name: "refill stops at the burst", steps: []step{
			{tenant: "a", rows: 300},
			{advance: time.Hour, tenant: "a", rows: 300},
			{tenant: "a", rows: 1, wantQuota: QuotaRows, wantRetry: 10 * time.Millisecond},
		}},
		{name: "tenants have their own buckets", steps: []step{
			{tenant: "a", rows: 300},
			{tenant: "a", rows: 1, wantQuota: QuotaRows, wantRetry: 10 * time.Millisecond},
			{tenant: "b", rows: 300},
		}},
		{name: "burst of zero is one second of the rate", steps: []step{
			{tenant: "a", bytes: 1000},
			{tenant: "a", bytes: 500, wantQuota: QuotaBytes, wantRetry: 500 * time.Millisecond},
			{advance: 500 * time.Millisecond, tenant: "a", bytes: 500},
		}},
		{name: "override", steps: []step{
			{tenant: "small", rows: 20},
			{tenant: "small", rows: 10, wantQuota: QuotaRows, wantRetry: time.Second},
			{tenant: "free", rows: 1_000_000, bytes: 1 << 30},
		}},
		{name: "a request larger than the burst needs a full bucket", steps: []step{
			{tenant: "a", rows: 1},
			{tenant: "a", rows: 1000, wantQuota: QuotaRows, wantRetry: 10 * time.Millisecond},
			{advance: 10 * time.Millisecond, tenant: "a", rows: 1000},
			{tenant: "a", rows: 1, wantQuota: QuotaRows, wantRetry: 10 * time.Millisecond},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, c := newTest(t, cfg)
			for i, s := range tt.steps {
				c.advance(s.advance)
				err := q.TakeRows(s.tenant, s.rows)
				if err == nil {
					err = q.TakeBytes(s.tenant, s.bytes)
				}
				if s.wantQuota == "" {
					if err != nil {
						t.Fatalf("step %d: %v, want success", i, err)
					}
					continue
				}
				var e *ExceededError
				if !errors.As(err, &e) {
					t.Fatalf("step %d: err %v, want an *ExceededError", i, err)
				}
				if e.Quota != s.wantQuota || e.Tenant != s.tenant {
					t.Errorf("step %d: refused by %s of %s, want %s of %s", i, e.Quota, e.Tenant, s.wantQuota, s.tenant)
				}
				if e.RetryAfter != s.wantRetry {
					t.Errorf("step %d: RetryAfter %s, want %s", i, e.RetryAfter, s.wantRetry)
				}
			}
		})
	}
}

func TestExceededMessage(t *testing.T) {
	q, _ := newTest(t, Config{Default: Limits{RowsPerSecond: 1000, RowBurst: 2000}})
	_ = q.TakeRows("acme", 2000)
	err := q.TakeRows("acme", 1500)
	var e *ExceededError
	if !errors.As(err, &e) {
		t.Fatalf("err %v, want an *ExceededError", err)
	}
	want := "nothing stored: tenant acme over its rows_per_second quota of 1000 (burst 2000; this request needs 1500); retry after 1.5s"
	if got := ExceededMessage(e); got != want {
		t.Errorf("message\n %q, want\n %q", got, want)
	}
}

func TestEnter(t *testing.T) {
	q, _ := newTest(t, Config{
		Default: Limits{MaxConcurrentRequests: 2},
		Tenants: []Override{{Tenant: "big", MaxConcurrentRequests: ptr(0)}},
	})
	r1, err1 := q.Enter("a")
	r2, err2 := q.Enter("a")
	if err1 != nil || err2 != nil {
		t.Fatalf("first two requests refused: %v, %v", err1, err2)
	}
	_, err := q.Enter("a")
	var e *ExceededError
	if !errors.As(err, &e) || e.Quota != QuotaConcurrent || e.Limit != 2 || e.RetryAfter != time.Second {
		t.Fatalf("third request: %v, want the max_concurrent_requests quota of 2 with a retry after 1s", err)
	}
	if _, err := q.Enter("b"); err != nil {
		t.Errorf("another tenant refused: %v", err)
	}
	for range 10 {
		if _, err := q.Enter("big"); err != nil {
			t.Fatalf("unlimited tenant refused: %v", err)
		}
	}
	r1()
	r1() // a second release changes nothing
	r3, err := q.Enter("a")
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, err := q.Enter("a"); err == nil {
		t.Fatal("a double release freed two places")
	}
	r2()
	r3()
	if got := testutil.ToFloat64(q.m.refused.WithLabelValues("(other)", QuotaConcurrent)); got != 2 {
		t.Errorf("refused requests counted %v, want 2", got)
	}
}

func TestWait(t *testing.T) {
	tests := []struct {
		name       string
		lim        Limits
		rows       []int64 // one Wait each
		bytes      int64   // with each Wait
		wantSlept  []time.Duration
		wantWaited float64 // sluice_quota_waits_total, rows and bytes
	}{
		{name: "within the burst: no wait", lim: Limits{RowsPerSecond: 100}, rows: []int64{50, 50}},
		{name: "over the rate waits for the tokens", lim: Limits{RowsPerSecond: 100},
			rows: []int64{100, 50, 100}, wantSlept: []time.Duration{500 * time.Millisecond, time.Second}, wantWaited: 2},
		{name: "larger than the burst: a burst at a time", lim: Limits{RowsPerSecond: 100},
			rows: []int64{250}, wantSlept: []time.Duration{time.Second, 500 * time.Millisecond}, wantWaited: 1},
		{name: "rows then bytes", lim: Limits{RowsPerSecond: 100, BytesPerSecond: 1000},
			rows: []int64{100, 100}, bytes: 1500,
			// First: the rows are there, the bytes a burst (1000) at a
			// time: 500 ms for the last 500. Second: 500 ms for the rows
			// (50 there); by then the byte bucket is empty again: 500 ms
			// for each of its two parts.
			wantSlept: []time.Duration{500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond}, wantWaited: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, c := newTest(t, Config{Default: tt.lim})
			for _, n := range tt.rows {
				if err := q.Wait(context.Background(), "acme", n, tt.bytes); err != nil {
					t.Fatal(err)
				}
			}
			if fmt.Sprint(c.slept) != fmt.Sprint(tt.wantSlept) {
				t.Errorf("slept %v, want %v", c.slept, tt.wantSlept)
			}
			got := testutil.ToFloat64(q.m.waits.WithLabelValues("(other)", QuotaRows)) + testutil.ToFloat64(q.m.waits.WithLabelValues("(other)", QuotaBytes))
			if got != tt.wantWaited {
				t.Errorf("waits counted %v, want %v", got, tt.wantWaited)
			}
		})
	}
}

// A wait that ends with its context gives its tokens back, so the next
// message is not charged for the one that gave up.
func TestWaitCancelled(t *testing.T) {
	q, c := newTest(t, Config{Default: Limits{RowsPerSecond: 100}})
	if err := q.Wait(context.Background(), "acme", 100, 0); err != nil {
		t.Fatal(err)
	}
	c.cancel = true
	err := q.Wait(context.Background(), "acme", 100, 0)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "rows_per_second") {
		t.Fatalf("err %v, want context.Canceled naming the quota", err)
	}
	c.cancel = false
	c.advance(time.Second)
	if err := q.TakeRows("acme", 100); err != nil {
		t.Errorf("the cancelled wait kept its tokens: %v", err)
	}
}

// Tenants without quotas have no state; tenants outside the configuration
// (MQTT topics) have at most max states, then share one.
func TestBoundedState(t *testing.T) {
	q, _ := newTest(t, Config{Default: Limits{}, Tenants: []Override{{Tenant: "acme", RowsPerSecond: ptr(10)}}})
	for i := range 100 {
		if err := q.TakeRows(fmt.Sprintf("t%d", i), 5); err != nil {
			t.Fatal(err)
		}
	}
	if len(q.tenants) != 0 {
		t.Fatalf("%d states kept for tenants without quotas, want 0", len(q.tenants))
	}

	q, c := newTest(t, Config{Default: Limits{RowsPerSecond: 10}}, "named-1", "named-2")
	q.max = 3
	for i := range 5 {
		if err := q.TakeRows(fmt.Sprintf("t%d", i), 10); err != nil && i < 4 {
			t.Fatalf("tenant t%d: %v", i, err) // t3 takes the shared state's burst, t4 finds it empty
		}
	}
	if err := q.TakeRows("t4", 1); err == nil {
		t.Error("tenants beyond the bound do not share a state")
	}
	for _, n := range []string{"named-1", "named-2"} {
		if err := q.TakeRows(n, 10); err != nil {
			t.Errorf("configured tenant %s shares the overflow state: %v", n, err)
		}
	}
	if len(q.tenants) != 5 || q.unnamed != 3 {
		t.Fatalf("%d states, %d unnamed; want 5 and 3", len(q.tenants), q.unnamed)
	}
	// Once their buckets are full again, idle states go and make room.
	c.advance(2 * time.Second)
	if err := q.TakeRows("t9", 10); err != nil {
		t.Fatal(err)
	}
	if _, ok := q.tenants["t9"]; !ok || q.unnamed != 1 || len(q.tenants) != 3 {
		t.Errorf("after the sweep: %d states, %d unnamed, t9 kept %v; want 3, 1, true", len(q.tenants), q.unnamed, ok)
	}
}

func TestValidate(t *testing.T) {
	b := Bounds{Rows: Bound{"limits.max_rows", 10000}, Bytes: Bound{"http.max_body_bytes", 1 << 20}}
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error, in order; none: valid
	}{
		{name: "defaults", cfg: DefaultConfig()},
		{name: "rates with bursts", cfg: Config{Default: Limits{RowsPerSecond: 1000, RowBurst: 10000, BytesPerSecond: 1 << 20, MaxConcurrentRequests: 4}}},
		{name: "negative", cfg: Config{Default: Limits{RowsPerSecond: -1, MaxConcurrentRequests: -2}},
			want: []string{"quotas.default.rows_per_second: must be 0 (unlimited) to 2147483647, got -1", "quotas.default.max_concurrent_requests: must be 0 (unlimited) to 2147483647, got -2"}},
		{name: "too large", cfg: Config{Default: Limits{BytesPerSecond: 1 << 40}},
			want: []string{"quotas.default.bytes_per_second: must be 0 (unlimited) to 2147483647, got 1099511627776"}},
		{name: "burst below the largest request", cfg: Config{Default: Limits{RowsPerSecond: 1000, RowBurst: 5000}},
			want: []string{"quotas.default.row_burst: must be at least limits.max_rows (10000) so that the largest request fits, got 5000"}},
		{name: "implicit burst below the largest request", cfg: Config{Default: Limits{BytesPerSecond: 1000}},
			want: []string{"quotas.default.byte_burst: 0 means one second of bytes_per_second (1000), less than http.max_body_bytes (1048576)"}},
		{name: "burst without a rate is ignored", cfg: Config{Default: Limits{RowBurst: 5}}},
		{name: "override of a bad default: reported once", cfg: Config{
			Default: Limits{RowsPerSecond: 1000, RowBurst: 5000},
			Tenants: []Override{{Tenant: "acme", MaxConcurrentRequests: ptr(3)}, {Tenant: "big", RowBurst: ptr(20000)}},
		}, want: []string{"quotas.default.row_burst"}},
		{name: "override inherits the burst", cfg: Config{
			Default: Limits{RowBurst: 10000},
			Tenants: []Override{{Tenant: "acme", RowsPerSecond: ptr(100)}},
		}},
		{name: "bad overrides", cfg: Config{Tenants: []Override{
			{Tenant: "a b"}, {Tenant: "acme"}, {Tenant: "acme"}, {Tenant: "x", RowsPerSecond: ptr(100), MaxConcurrentRequests: ptr(-1)},
		}}, want: []string{
			`quotas.tenants[0].tenant: "a b" must be 1-64 characters`,
			`quotas.tenants[2].tenant: "acme" is listed twice`,
			"quotas.tenants[3].max_concurrent_requests: must be 0 (unlimited)",
			"quotas.tenants[3].row_burst: 0 means one second of rows_per_second (100)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate(b)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("valid config refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", tt.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("error %d: %q, want it to contain %q", i, lines[i], w)
				}
			}
		})
	}
}
