package retention_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// TestCassandraTombstones shows what the drop leaves behind, against the
// per-row alternative on the same data. Two partitions of n readings each:
// A is dropped by the sweeper's DropData (one partition delete), B row by
// row (n DELETEs). Then each is read with tracing: Cassandra reports how
// many tombstones the read scanned, and the server's own table metric
// system_views.tombstones_per_read is read before and after.
func TestCassandraTombstones(t *testing.T) {
	st := openCassandra(t)
	sess := cqlSession(t)
	ctx := t.Context()
	const n = 500
	tenant := uniq("tomb")
	d := today - 100
	var b store.Batch
	for _, series := range []string{"A", "B"} {
		pk := model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: series, Day: d}
		pw := store.PartitionWrite{Key: pk}
		for j := range n {
			pw.Readings = append(pw.Readings, model.ReadingRow{TS: d.Start() + int64(j), Metric: "m", Value: 1})
		}
		b.Partitions = append(b.Partitions, pw)
		b.Catalogue = append(b.Catalogue, model.PartitionInfo{Key: pk, Rows: n, MinTS: d.Start(), MaxTS: d.Start() + n, State: "single"})
	}
	if err := st.Commit(ctx, &b); err != nil {
		t.Fatal(err)
	}
	before := tombstoneMetric(t, sess)

	// The bucket drop: one partition delete per partition, A and B.
	ops, err := st.DropData(ctx, store.Bucket{Kind: store.BucketReadings, Tenant: tenant, Day: d})
	if err != nil {
		t.Fatal(err)
	}
	// The alternative: write B again and delete it row by row.
	var rb store.Batch
	rb.Partitions = append(rb.Partitions, b.Partitions[1])
	if err := st.Commit(ctx, &rb); err != nil {
		t.Fatal(err)
	}
	for j := range n {
		if err := sess.Query(`DELETE FROM readings WHERE tenant = ? AND device = ? AND day = ? AND sub = ? AND ts = ? AND metric = ?`,
			tenant, "B", d.Start(), int32(0), d.Start()+int64(j), "m").ExecContext(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tombA := tracedTombstones(t, sess, tenant, "A", d)
	tombB := tracedTombstones(t, sess, tenant, "B", d)
	after := tombstoneMetric(t, sess)
	t.Logf("bucket drop: %d deletes for 2 partitions of %d rows; a read of a dropped partition scanned %d tombstone cells", ops, n, tombA)
	t.Logf("per-row deletes: %d deletes for 1 partition of %d rows; a read of it scanned %d tombstone cells", n, n, tombB)
	t.Logf("system_views.tombstones_per_read for %s.readings: before %s, after %s", cqlCfg.Keyspace, before, after)
	if tombA != 0 {
		t.Errorf("read of a dropped partition scanned %d tombstones, want 0 (a partition tombstone is one marker)", tombA)
	}
	if tombB < n {
		t.Errorf("read of a row-deleted partition scanned %d tombstones, want >= %d (the test would prove nothing)", tombB, n)
	}
	if ops > 2 {
		t.Errorf("DropData issued %d deletes for 2 partitions of %d rows, want 2", ops, n)
	}
}

func cqlSession(t *testing.T) *gocql.Session {
	t.Helper()
	cc := gocql.NewCluster(cassandraAddr())
	cc.Keyspace = cqlCfg.Keyspace
	cc.Consistency = gocql.One
	sess, err := cc.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.Close)
	return sess
}

var tombRE = regexp.MustCompile(`Read (\d+) live rows and (\d+) tombstone cells`)

// idTracer keeps the trace session ids of the queries it traces.
type idTracer struct{ ids [][]byte }

func (t *idTracer) Trace(id []byte) { t.ids = append(t.ids, id) }

// tracedTombstones reads one partition with tracing on and returns the
// tombstone cells the replica reports scanning. Trace events are written
// asynchronously, so it polls system_traces until the read's event is there.
func tracedTombstones(t *testing.T, sess *gocql.Session, tenant, device string, d model.Day) int {
	t.Helper()
	tr := &idTracer{}
	it := sess.Query(`SELECT ts FROM readings WHERE tenant = ? AND device = ? AND day = ? AND sub = ?`, tenant, device, d.Start(), int32(0)).
		Trace(tr).Iter()
	var ts int64
	rows := 0
	for it.Scan(&ts) {
		rows++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Fatalf("partition %s still has %d rows", device, rows)
	}
	if len(tr.ids) == 0 {
		t.Fatal("the read was not traced")
	}
	id := tr.ids[len(tr.ids)-1]
	var events []string
	for range 100 {
		events = events[:0]
		total, found := 0, false
		iter := sess.Query(`SELECT activity FROM system_traces.events WHERE session_id = ?`, id).Iter()
		var activity string
		for iter.Scan(&activity) {
			events = append(events, activity)
			if m := tombRE.FindStringSubmatch(activity); m != nil {
				v, _ := strconv.Atoi(m[2])
				total += v
				found = true
			}
		}
		if err := iter.Close(); err != nil {
			t.Fatal(err)
		}
		if found {
			return total
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no tombstone count in the trace of %s after 10s: %q", device, events)
	return 0
}

// tombstoneMetric reads the table's tombstones-per-read histogram from the
// server's virtual tables (Cassandra 4.1+), or says why it cannot.
func tombstoneMetric(t *testing.T, sess *gocql.Session) string {
	t.Helper()
	row := map[string]any{}
	if err := sess.Query(`SELECT * FROM system_views.tombstones_per_read WHERE keyspace_name = ? AND table_name = ?`, cqlCfg.Keyspace, "readings").MapScan(row); err != nil {
		return fmt.Sprintf("(unavailable: %v)", err)
	}
	delete(row, "keyspace_name")
	delete(row, "table_name")
	return fmt.Sprint(row)
}
