package main

// The fairness benchmark of docs/benchmarks.md ("Tenant quotas"): a
// well-behaved tenant's acknowledgement latency and throughput alone, and
// beside a tenant that sends ten times its quota, in one invocation:
//
//	go test -run='^$' -bench=TenantFairness -benchtime=1000x ./cmd/ingest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/quota"
)

const (
	// The flooding tenant's quota, in readings a second, and what it sends:
	// ten times that, as requests of benchReadings readings at a steady
	// pace from up to floodSenders requests at once.
	floodQuota   = 20_000
	floodOffered = 10 * floodQuota
	floodSenders = 16
	// The well-behaved tenant: calmWriters clients, each posting its next
	// request as soon as the last is acknowledged.
	calmWriters = 2
)

// BenchmarkTenantFairness runs the well-behaved tenant for b.N requests
// three times, each on a fresh gateway: alone; beside the flooding tenant
// held to its quota (rows_per_second 20,000, bytes_per_second 2,000,000,
// max_concurrent_requests 4); and beside the same flood with no quota, as
// before quotas existed. It reports, per case, the well-behaved tenant's
// p99 and median acknowledgement latency and its readings/s, and the
// flooding tenant's acknowledged readings/s and 429s a second.
func BenchmarkTenantFairness(b *testing.B) {
	_, bodies := benchLive(benchBodies, benchDevices)
	type result struct {
		p50, p99      time.Duration
		calmPerSecond float64
		floodAccepted float64
		floodRefused  float64
	}
	run := func(flood, limited bool) result {
		cfg, _, err := config.Load("", os.Environ())
		if err != nil {
			b.Fatal(err)
		}
		cfg.DataDir = b.TempDir()
		cfg.HTTP.Addr = "127.0.0.1:0"
		cfg.Auth.Tokens = []config.Token{{Token: "calm-token", Tenant: "calm"}, {Token: "flood-token", Tenant: "flood"}}
		if limited {
			n := func(v int64) *int64 { return &v }
			cfg.Quotas.Tenants = []quota.Override{{
				Tenant: "flood", RowsPerSecond: n(floodQuota), RowBurst: n(floodQuota),
				BytesPerSecond: n(2_000_000), ByteBurst: n(cfg.HTTP.MaxBodyBytes), MaxConcurrentRequests: n(4),
			}}
		}
		if err := cfg.Validate(); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		addr := make(chan string, 1)
		done := make(chan error, 1)
		keepHeapUnlimited(b)
		go func() {
			done <- serve(ctx, cfg, "", slog.New(slog.DiscardHandler), func(a string) { addr <- a })
		}()
		url := "http://" + <-addr + "/v1/readings"
		// Separate clients, as separate tenants' producers would be.
		calmClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: calmWriters}}
		floodClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: floodSenders}}
		post := func(hc *http.Client, token string, body []byte) int {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp, err := hc.Do(req)
			if err != nil {
				b.Error(err)
				return 0
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}

		// The flood: a request every 1/floodOffered*benchReadings seconds,
		// sent by whichever sender is free (none free: the request is
		// skipped and counted, so the offered load is what was sent).
		stopFlood := make(chan struct{})
		var floodWG sync.WaitGroup
		var accepted, refused, skipped atomic.Int64
		if flood {
			jobs := make(chan []byte, floodSenders)
			for range floodSenders {
				floodWG.Go(func() {
					for body := range jobs {
						switch st := post(floodClient, "flood-token", body); st {
						case http.StatusAccepted:
							accepted.Add(1)
						case http.StatusTooManyRequests, http.StatusServiceUnavailable:
							refused.Add(1)
						default:
							b.Errorf("flood: status %d", st)
						}
					}
				})
			}
			floodWG.Go(func() {
				defer close(jobs)
				tick := time.NewTicker(time.Second * benchReadings / floodOffered)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stopFlood:
						return
					case <-tick.C:
					}
					select {
					case jobs <- bodies[i%len(bodies)]:
					default:
						skipped.Add(1)
					}
				}
			})
			time.Sleep(time.Second) // past the flood's burst, to its steady state
		}

		lat := make([]time.Duration, b.N)
		var next atomic.Int64
		var calmWG sync.WaitGroup
		accepted.Store(0)
		refused.Store(0)
		start := time.Now()
		for range calmWriters {
			calmWG.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= b.N {
						return
					}
					t0 := time.Now()
					if st := post(calmClient, "calm-token", bodies[i%len(bodies)]); st != http.StatusAccepted {
						b.Errorf("calm: status %d", st)
					}
					lat[i] = time.Since(t0)
				}
			})
		}
		calmWG.Wait()
		elapsed := time.Since(start)
		acc, ref := accepted.Load(), refused.Load()
		if flood {
			metrics := url[:len(url)-len("/v1/readings")] + "/metrics"
			for _, q := range []string{quota.QuotaRows, quota.QuotaBytes, quota.QuotaConcurrent} {
				if n := scrapeCounter(b, calmClient, metrics, `sluice_quota_refused_requests_total{quota="`+q+`",tenant="flood"}`); n > 0 {
					b.Logf("flood requests refused by %s: %.0f", q, n)
				}
			}
		}
		close(stopFlood)
		floodWG.Wait()
		if s := skipped.Load(); s > 0 {
			b.Logf("flood: %d requests not sent (every sender busy)", s)
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		slices.Sort(lat)
		return result{
			p50: lat[len(lat)/2], p99: lat[min(len(lat)-1, len(lat)*99/100)],
			calmPerSecond: float64(b.N*benchReadings) / elapsed.Seconds(),
			floodAccepted: float64(acc*benchReadings) / elapsed.Seconds(),
			floodRefused:  float64(ref) / elapsed.Seconds(),
		}
	}
	b.ResetTimer()
	alone := run(false, false)
	limited := run(true, true)
	unlimited := run(true, false)
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, c := range []struct {
		name string
		r    result
	}{{"alone", alone}, {"quota", limited}, {"noquota", unlimited}} {
		b.ReportMetric(ms(c.r.p50), c.name+"_p50_ms")
		b.ReportMetric(ms(c.r.p99), c.name+"_p99_ms")
		b.ReportMetric(c.r.calmPerSecond, c.name+"_readings/s")
		if c.name != "alone" {
			b.ReportMetric(c.r.floodAccepted, c.name+"_flood_acked_readings/s")
			b.ReportMetric(c.r.floodRefused, c.name+"_flood_refused/s")
		}
	}
	b.ReportMetric(0, "ns/op")
}
