package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/quota"
)

// Quotas come from the file (default and per-tenant overrides; tenant
// names keep their case) and, for the default, from the environment.
func TestQuotasFromFileAndEnvironment(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ingest.yaml")
	yaml := `quotas:
  default:
    rows_per_second: 5000
    row_burst: 20000
  tenants:
    - tenant: Acme
      rows_per_second: 0
    - tenant: beta
      bytes_per_second: 1000000
      byte_burst: 16777216
      max_concurrent_requests: 2
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err := Load(file, []string{"SLUICE_QUOTAS_DEFAULT_MAX_CONCURRENT_REQUESTS=8"})
	if err != nil {
		t.Fatal(err)
	}
	n := func(v int64) *int64 { return &v }
	want := quota.Config{
		Default: quota.Limits{RowsPerSecond: 5000, RowBurst: 20000, MaxConcurrentRequests: 8},
		Tenants: []quota.Override{
			{Tenant: "Acme", RowsPerSecond: n(0)},
			{Tenant: "beta", BytesPerSecond: n(1000000), ByteBurst: n(16 << 20), MaxConcurrentRequests: n(2)},
		},
	}
	if diff := cmp.Diff(want, got.Quotas); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if l := quota.New(got.Quotas, nil, time.Now, nil).For("Acme"); l != (quota.Limits{RowBurst: 20000, MaxConcurrentRequests: 8}) {
		t.Errorf("Acme's quotas %+v: the override's 0 must mean unlimited, the rest inherited", l)
	}
}

func TestQuotaRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		yaml string
		want string
	}{
		{name: "negative", env: []string{"SLUICE_QUOTAS_DEFAULT_ROWS_PER_SECOND=-5"}, want: "quotas.default.rows_per_second: must be 0 (unlimited) to 2147483647, got -5"},
		{name: "not a number", env: []string{"SLUICE_QUOTAS_DEFAULT_BYTES_PER_SECOND=lots"}, want: `quotas.default.bytes_per_second (from SLUICE_QUOTAS_DEFAULT_BYTES_PER_SECOND): "lots" is not a whole number`},
		{name: "burst under limits.max_rows", env: []string{"SLUICE_QUOTAS_DEFAULT_ROWS_PER_SECOND=100", "SLUICE_QUOTAS_DEFAULT_ROW_BURST=500"},
			want: "quotas.default.row_burst: must be at least limits.max_rows (10000) so that the largest request fits, got 500"},
		{name: "implicit byte burst under http.max_body_bytes", env: []string{"SLUICE_QUOTAS_DEFAULT_BYTES_PER_SECOND=1000000"},
			want: "quotas.default.byte_burst: 0 means one second of bytes_per_second (1000000), less than http.max_body_bytes (16777216)"},
		{name: "unknown key in an override", yaml: "quotas:\n  tenants:\n    - tenant: acme\n      rows_per_minute: 10\n", want: "rows_per_minute"},
		{name: "tenant twice", yaml: "quotas:\n  tenants:\n    - tenant: acme\n    - tenant: acme\n", want: `quotas.tenants[1].tenant: "acme" is listed twice`},
		{name: "bad tenant", yaml: "quotas:\n  tenants:\n    - tenant: a/b\n", want: `quotas.tenants[0].tenant: "a/b" must be`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			file := ""
			if tc.yaml != "" {
				file = "x.yaml"
				if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Load(file, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
