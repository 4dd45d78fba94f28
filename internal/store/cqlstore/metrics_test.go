package cqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// requestMetrics returns, from reg, the requests timed and the errors
// counted, summed over operations.
func requestMetrics(t *testing.T, reg *prometheus.Registry) (requests uint64, errs float64) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "sluice_cassandra_request_seconds":
				requests += m.GetHistogram().GetSampleCount()
			case "sluice_cassandra_request_errors_total":
				errs += m.GetCounter().GetValue()
			}
		}
	}
	return requests, errs
}

// TestRequestMetrics checks that requests to Cassandra are timed, and that
// requests that fail (here: a timeout far too short for any answer) are
// counted as errors.
func TestRequestMetrics(t *testing.T) {
	requireCassandra(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := prometheus.NewRegistry()
	st, err := cqlstore.Open(ctx, testCfg, discard, reg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer st.Close()
	tenant := unique(t)
	day := model.Day(20_502)
	pk := model.PartitionKey{Kind: model.KindReadings, Tenant: tenant, Series: "pump", Day: day}
	ts := day.Start() + 1000
	b := &store.Batch{
		Partitions: []store.PartitionWrite{{Key: pk, Readings: []model.ReadingRow{{TS: ts, Metric: "rpm", Value: 1}}}},
		Catalogue:  []model.PartitionInfo{{Key: pk, Rows: 1, Bytes: 10, MinTS: ts, MaxTS: ts, State: "single"}},
	}
	if err := st.Commit(ctx, b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	before, errsBefore := requestMetrics(t, reg)
	if before == 0 || errsBefore != 0 {
		t.Fatalf("after a commit: %d requests timed, %v errors; want some, none", before, errsBefore)
	}

	// A store whose keyspace is dropped under it: its requests fail, after
	// their retries, and each failure counts.
	cfg := testCfg
	cfg.Keyspace += "_m"
	cfg.Retries = 0
	if err := cqlstore.Migrate(ctx, cfg, discard); err != nil {
		t.Fatalf("Migrate %s: %v", cfg.Keyspace, err)
	}
	freg := prometheus.NewRegistry()
	fst, err := cqlstore.Open(ctx, cfg, discard, freg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer fst.Close()
	if err := cqlstore.DropKeyspace(ctx, cfg, discard); err != nil {
		t.Fatalf("DropKeyspace: %v", err)
	}
	if err := fst.Commit(ctx, b); err == nil {
		t.Fatal("Commit into a dropped keyspace succeeded")
	}
	if requests, errs := requestMetrics(t, freg); errs == 0 || float64(requests) < errs {
		t.Errorf("after a failed commit: %d requests timed, %v errors; want at least one error, each timed", requests, errs)
	}
}
