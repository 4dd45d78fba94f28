package cqlstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// TestTypedValuesAfterUpgrade starts from a keyspace whose readings table
// was created before typed values (no vtype, ivalue, svalue) and holds a
// row: the migration adds the columns, the old row reads back as the float
// it was, and typed rows written afterwards read back with their types.
func TestTypedValuesAfterUpgrade(t *testing.T) {
	requireCassandra(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := testCfg
	cfg.Keyspace = testCfg.Keyspace + "_old"
	t.Cleanup(func() {
		if err := cqlstore.DropKeyspace(context.Background(), cfg, discard); err != nil {
			t.Errorf("drop keyspace: %v", err)
		}
	})
	sess := openStore(t, nil).Session()
	day := model.Day(20_600)
	ts := day.Start() + 1000
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`, cfg.Keyspace),
		// The readings table as Sluice created it before typed values.
		fmt.Sprintf(`CREATE TABLE %s.readings (
    tenant text, device text, day date, sub int, ts timestamp, metric text,
    value double, seq bigint, has_seq boolean,
    PRIMARY KEY ((tenant, device, day, sub), ts, metric)
) WITH CLUSTERING ORDER BY (ts ASC, metric ASC)`, cfg.Keyspace),
		fmt.Sprintf(`INSERT INTO %s.readings (tenant, device, day, sub, ts, metric, value, seq, has_seq)
    VALUES ('t', 'door-3', '%s', 0, %d, 'temp_c', 21.5, 4, true)`, cfg.Keyspace, day, ts),
	} {
		if err := sess.Query(stmt).ExecContext(ctx); err != nil {
			t.Fatalf("%.40s: %v", stmt, err)
		}
		if err := sess.AwaitSchemaAgreement(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cqlstore.Migrate(ctx, cfg, discard); err != nil {
		t.Fatalf("migrate the old keyspace: %v", err)
	}
	st, err := cqlstore.Open(ctx, cfg, discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pk := model.PartitionKey{Kind: model.KindReadings, Tenant: "t", Series: "door-3", Day: day}
	old := model.ReadingRow{TS: ts, Metric: "temp_c", Value: 21.5, Seq: 4, HasSeq: true}
	typed := []model.ReadingRow{
		{TS: ts + 1, Metric: "count", Type: model.TypeInt, Int: -9_007_199_254_740_993},
		{TS: ts + 1, Metric: "fw", Type: model.TypeString, Str: "1.4.2"},
		{TS: ts + 1, Metric: "open", Type: model.TypeBool, Int: 1},
		{TS: ts + 1, Metric: "temp_c", Value: 22},
	}
	if err := st.Commit(ctx, &store.Batch{Partitions: []store.PartitionWrite{{Key: pk, Readings: typed}}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.ScanReadings(ctx, pk, store.Range{From: day.Start(), To: day.End()}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append([]model.ReadingRow{old}, typed...), got); diff != "" {
		t.Errorf("readings after the upgrade (-want +got):\n%s", diff)
	}
	// A value type this gateway does not know is an error, not a zero.
	if err := sess.Query(fmt.Sprintf(`UPDATE %s.readings SET vtype = 9 WHERE tenant = 't' AND device = 'door-3' AND day = '%s' AND sub = 0 AND ts = %d AND metric = 'fw'`,
		cfg.Keyspace, day, ts+1)).ExecContext(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ScanReadings(ctx, pk, store.Range{From: day.Start(), To: day.End()}, 100); err == nil {
		t.Error("a row of value type 9 read without an error")
	}
}
