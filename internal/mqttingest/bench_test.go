package mqttingest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/buckets"
	"github.com/sluicehq/sluice/internal/membudget"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/sink"
	"github.com/sluicehq/sluice/internal/store/pebblestore"
	"github.com/sluicehq/sluice/internal/testenv"
)

// Benchmark sizes: messages of readingsPerMessage readings each, over
// benchDevices devices. Mosquitto must queue them all for an offline
// session (scripts/mosquitto/mosquitto.conf: max_queued_messages 100000).
const (
	benchMessages           = 20_000
	benchReadingsPerMessage = 10
	benchDevices            = 1_000
)

func benchPayloads(prefix string, base int64) (topics, payloads []string) {
	for i := range benchMessages {
		dev := fmt.Sprintf("dev-%04d", i%benchDevices)
		var b strings.Builder
		b.WriteByte('[')
		for j := range benchReadingsPerMessage {
			if j > 0 {
				b.WriteByte(',')
			}
			ts := base + int64(i/benchDevices)*benchReadingsPerMessage + int64(j)
			fmt.Fprintf(&b, `{"ts":%d,"seq":%d,"metrics":{"temp_c":%d.5,"rpm":%d}}`, ts, i, i%40, 1000+i%500)
		}
		b.WriteByte(']')
		topics = append(topics, prefix+"/"+dev+"/readings")
		payloads = append(payloads, b.String())
	}
	return topics, payloads
}

// queue publishes the messages while the subscriber identified by its
// persistent session is offline, so that both measurements start from the
// same backlog at the broker and measure delivery, not publishing.
func queue(b *testing.B, topics, payloads []string, id string) {
	pub := publisher(b, mosquittoAddr, id, "", "")
	toks := make([]mqtt.Token, len(topics))
	for i := range topics {
		toks[i] = pub.Publish(topics[i], 1, false, payloads[i])
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(60*time.Second) || tok.Error() != nil {
			b.Fatalf("publish: %v", tok.Error())
		}
	}
	pub.Disconnect(100)
}

// dropSession ends the persistent session id at the broker (a clean-session
// connection discards it), so that benchmark runs leave no state behind.
func dropSession(b *testing.B, id string) {
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + mosquittoAddr).SetClientID(id).SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Logf("drop session %s: %v", id, tok.Error())
		return
	}
	c.Disconnect(100)
}

// noopDrain measures the limit: a QoS 1 subscriber that acknowledges each
// message as it arrives and does nothing else. buffered gives it the
// gateway's connection (bufConn) instead of paho's own.
func noopDrain(b *testing.B, prefix string, topics, payloads []string, buffered bool) (time.Duration, cpuUse) {
	id := prefix + "-noop"
	if buffered {
		id += "-buf"
	}
	var got atomic.Int64
	done := make(chan struct{})
	o := mqtt.NewClientOptions().AddBroker("tcp://" + mosquittoAddr).SetClientID(id).SetCleanSession(false).
		SetOrderMatters(true).SetConnectTimeout(30 * time.Second).SetDefaultPublishHandler(func(mqtt.Client, mqtt.Message) {
		if got.Add(1) == int64(len(topics)) {
			close(done)
		}
	})
	if buffered {
		o.SetCustomOpenConnectionFn(func(u *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
			c, err := dialBroker(u, o)
			if err != nil {
				return nil, err
			}
			return newBufConn(c, 30*time.Second), nil
		})
	}
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Fatalf("connect: %v", tok.Error())
	}
	if tok := c.Subscribe(prefix+"/+/readings", 1, nil); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	c.Disconnect(100)
	queue(b, topics, payloads, id+"-pub")
	start, cpu0 := time.Now(), cpuNow(b)
	c = mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		b.Fatalf("connect: %v", tok.Error())
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("no-op subscriber got %d of %d messages", got.Load(), len(topics))
	}
	d, cpu := time.Since(start), cpuNow(b).sub(cpu0)
	c.Disconnect(100)
	dropSession(b, id)
	return d, cpu
}

// cpuUse is CPU time used by this process and by the broker.
type cpuUse struct{ self, broker time.Duration }

func (c cpuUse) sub(d cpuUse) cpuUse { return cpuUse{c.self - d.self, c.broker - d.broker} }
func (c cpuUse) add(d cpuUse) cpuUse { return cpuUse{c.self + d.self, c.broker + d.broker} }

// cpuNow samples the CPU time of this process and of the Mosquitto
// process (found by name; zero if there is not exactly one).
func cpuNow(b *testing.B) cpuUse {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	u := cpuUse{self: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	var pids []string
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if comm, err := os.ReadFile("/proc/" + d.Name() + "/comm"); err == nil && strings.TrimSpace(string(comm)) == "mosquitto" {
			pids = append(pids, d.Name())
		}
	}
	if len(pids) != 1 {
		return u
	}
	stat, err := os.ReadFile("/proc/" + pids[0] + "/stat")
	if err != nil {
		return u
	}
	// Fields after the parenthesised command: utime and stime are the
	// 12th and 13th, in clock ticks (100 per second on Linux).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) > 12 {
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		u.broker = time.Duration(ut+st) * 10 * time.Millisecond
	}
	return u
}

// countingWriter reports when a number of readings has been made durable.
// It also counts the writes and their latency.
type countingWriter struct {
	w      Writer
	want   int64
	got    atomic.Int64
	writes atomic.Int64
	nanos  atomic.Int64 // summed latency of the writes
	done   chan struct{}
}

func (c *countingWriter) Write(ctx context.Context, r *sink.Request) error {
	start := time.Now()
	if err := c.w.Write(ctx, r); err != nil {
		return err
	}
	c.writes.Add(1)
	c.nanos.Add(int64(time.Since(start)))
	if c.got.Add(int64(len(r.Readings))) == c.want {
		close(c.done)
	}
	return nil
}

// drainStats is what one gateway drain measured.
type drainStats struct {
	d      time.Duration
	writes int64         // sink writes
	wait   time.Duration // summed latency of the writes
	// inflight is the mean number of messages received and not yet
	// acknowledged.
	inflight float64
	cpu      cpuUse
}

// sluiceDrain measures the gateway: the same backlog, drained through the
// ingester into the durable store (Pebble with fsync), acknowledged after
// each commit. SLUICE_BENCH_LINGER, SLUICE_BENCH_COMMIT_DELAY,
// SLUICE_BENCH_COMMITS and SLUICE_BENCH_BATCH_ROWS override the sink
// defaults, and
// SLUICE_BENCH_MAX_INFLIGHT the ingester's mqtt.max_inflight.
func sluiceDrain(b *testing.B, prefix string, topics, payloads []string) drainStats {
	cfg := testConfig(mosquittoAddr, prefix)
	cfg.ClientID = prefix + "-sluice"
	scfg := sink.DefaultConfig()
	if d, err := time.ParseDuration(os.Getenv("SLUICE_BENCH_LINGER")); err == nil {
		scfg.Linger = d
	}
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_COMMITS")); err == nil {
		scfg.Commits = n
	}
	if d, err := time.ParseDuration(os.Getenv("SLUICE_BENCH_COMMIT_DELAY")); err == nil {
		scfg.CommitDelay = d
	}
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_BATCH_ROWS")); err == nil {
		scfg.BatchRows = n
	}
	if n, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_MAX_INFLIGHT")); err == nil {
		cfg.MaxInflight = n
	}
	stk := newStackSink(b, buckets.DefaultConfig(), scfg)
	cw := &countingWriter{w: stk.sk, want: int64(len(topics) * benchReadingsPerMessage), done: make(chan struct{})}
	g := startGateway(b, cfg, cw)
	g.stop(b)
	queue(b, topics, payloads, prefix+"-pub-sluice")
	w0, n0 := cw.writes.Load(), cw.nanos.Load()
	// SLUICE_BENCH_CPUPROFILE profiles the gateway's drain (the last of
	// the run is kept).
	stopProfile := testenv.CPUProfile(b, os.Getenv("SLUICE_BENCH_CPUPROFILE"))
	start, cpu0 := time.Now(), cpuNow(b)
	g = startGatewayWait(b, cfg, cw, false)
	// Sample the messages in flight (received, not yet acknowledged).
	var samples, sum int64
	tick := time.NewTicker(time.Millisecond)
wait:
	for {
		select {
		case <-cw.done:
			break wait
		case <-tick.C:
			samples++
			sum += int64(len(g.in.inflight))
		case <-time.After(5 * time.Minute):
			b.Fatalf("gateway stored %d of %d readings", cw.got.Load(), cw.want)
		}
	}
	tick.Stop()
	st := drainStats{d: time.Since(start), writes: cw.writes.Load() - w0, wait: time.Duration(cw.nanos.Load() - n0),
		inflight: float64(sum) / float64(max(samples, 1)), cpu: cpuNow(b).sub(cpu0)}
	stopProfile()
	g.stop(b)
	dropSession(b, cfg.ClientID)
	return st
}

// storeDrain measures what the store itself can take: the readings of the
// same messages (decoded before the clock starts), written straight into a
// fresh Pebble database with the gateway's key layout, in the sink's
// default batches (sink.batch_rows rows) by sink.commits concurrent writers,
// each batch synced. No broker, no decoding, no bucketing: an upper bound for
// any gateway that stores these messages durably.
func storeDrain(b *testing.B, topics, payloads []string) (time.Duration, cpuUse) {
	// The gateway's rows, with its partition keys (tenant of testConfig,
	// one partition per device-day: no device outgrows the bound here).
	// One entry per reading: its cells, in name order, make one key.
	type cell struct {
		pk   model.PartitionKey
		rows []model.ReadingRow
	}
	var cells []cell
	for i, p := range payloads {
		dev := strings.Split(topics[i], "/")[2]
		var rs []struct {
			TS      int64              `json:"ts"`
			Seq     int64              `json:"seq"`
			Metrics map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal([]byte(p), &rs); err != nil {
			b.Fatal(err)
		}
		for _, r := range rs {
			pk := model.SeriesDay{Kind: model.KindReadings, Tenant: "acme", Series: dev, Day: model.DayOf(r.TS)}.Partition(0)
			c := cell{pk: pk}
			for _, m := range slices.Sorted(maps.Keys(r.Metrics)) {
				c.rows = append(c.rows, model.ReadingRow{TS: r.TS, Metric: m, Value: r.Metrics[m], Seq: r.Seq, HasSeq: true})
			}
			cells = append(cells, c)
		}
	}
	db, err := pebblestore.OpenDB(b.TempDir(), pebblestore.OptionsFor(membudget.For(membudget.Default, membudget.All)), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	scfg := sink.DefaultConfig()
	var next atomic.Int64
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), cpuNow(b)
	for range scfg.Commits {
		wg.Go(func() {
			var key, val []byte
			// A batch of sink.batch_rows rows: the readings of that many cells.
			perBatch := max(1, scfg.BatchRows/max(1, len(cells[0].rows)))
			for {
				from := int(next.Add(int64(perBatch))) - perBatch
				if from >= len(cells) {
					return
				}
				batch := db.NewBatch()
				for _, c := range cells[from:min(from+perBatch, len(cells))] {
					key, val = pebblestore.AppendReading(key[:0], val[:0], c.pk, c.rows)
					if err := batch.Merge(key, val, nil); err != nil {
						b.Error(err)
					}
				}
				if err := batch.Commit(pebble.Sync); err != nil {
					b.Error(err)
				}
				_ = batch.Close()
			}
		})
	}
	wg.Wait()
	return time.Since(start), cpuNow(b).sub(cpu0)
}

// BenchmarkMQTTToStore compares, in one run, the readings/s that Mosquitto
// delivers at QoS 1 to a subscriber that does nothing (the limit) with the
// readings/s the gateway makes durable from the same backlog. Each
// iteration drains the limit and the gateway in turn, and between them
// writes the same readings straight into Pebble (storeDrain): the rate the
// store alone allows, reported as store_limit_readings/s and as a share of
// the broker limit. SLUICE_MQTT_PORT
// points it at another Mosquitto (e.g. one with a larger
// max_inflight_messages).
//
//	bash scripts/servers.sh up mosquitto
//	go test -run '^$' -bench MQTTToStore -benchtime 2x -count 3 ./internal/mqttingest
func BenchmarkMQTTToStore(b *testing.B) {
	requireServer(b, mosquittoAddr, "mosquitto")
	readings := float64(benchMessages * benchReadingsPerMessage)
	var limit, limitBuf, storeLimit time.Duration
	var limitCPU, limitBufCPU, storeCPU cpuUse
	var gw drainStats
	n := 0
	for b.Loop() {
		prefix := "sluicebench/" + uniq(b)
		topics, payloads := benchPayloads(prefix, time.Now().Add(-time.Hour).UnixMilli())
		d, cpu := noopDrain(b, prefix, topics, payloads, false)
		limit, limitCPU = limit+d, limitCPU.add(cpu)
		d, cpu = noopDrain(b, prefix, topics, payloads, true)
		limitBuf, limitBufCPU = limitBuf+d, limitBufCPU.add(cpu)
		d, cpu = storeDrain(b, topics, payloads)
		storeLimit, storeCPU = storeLimit+d, storeCPU.add(cpu)
		st := sluiceDrain(b, prefix, topics, payloads)
		gw.cpu = gw.cpu.add(st.cpu)
		gw.d += st.d
		gw.writes += st.writes
		gw.wait += st.wait
		gw.inflight += st.inflight
		n++
	}
	total := readings * float64(n)
	rate := func(d time.Duration) float64 { return total / d.Seconds() }
	limitRate, bufRate, gwRate, storeRate := rate(limit), rate(limitBuf), rate(gw.d), rate(storeLimit)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(limitRate, "limit_paho_readings/s")
	b.ReportMetric(bufRate, "limit_readings/s")
	b.ReportMetric(gwRate, "readings/s")
	b.ReportMetric(100*gwRate/limitRate, "%_of_paho_limit")
	b.ReportMetric(100*gwRate/bufRate, "%_of_limit")
	b.ReportMetric(storeRate, "store_limit_readings/s")
	b.ReportMetric(100*storeRate/bufRate, "%_store_limit_of_limit")
	// CPU per reading: the broker's when it delivers to the no-op
	// subscriber, the store's alone, the gateway's. The two cores must
	// run the broker and the writer at once, so no writer of these rows
	// can pass cores / (broker + store) per reading.
	perReading := func(d time.Duration) float64 { return float64(d.Microseconds()) / total }
	b.ReportMetric(perReading(limitBufCPU.broker), "broker_cpu_us/reading")
	b.ReportMetric(perReading(limitBufCPU.self), "noop_cpu_us/reading")
	b.ReportMetric(perReading(storeCPU.self), "store_cpu_us/reading")
	b.ReportMetric(perReading(gw.cpu.self), "gateway_cpu_us/reading")
	if limitBufCPU.broker > 0 {
		bound := float64(runtime.NumCPU()) / (perReading(limitBufCPU.broker+storeCPU.self) / 1e6)
		b.ReportMetric(100*bound/bufRate, "%_cpu_bound_of_limit")
	}
	b.ReportMetric(float64(gw.writes)/gw.d.Seconds(), "writes/s")
	b.ReportMetric(float64(benchMessages*n)/float64(max(gw.writes, 1)), "msgs/write")
	b.ReportMetric(gw.wait.Seconds()*1000/float64(max(gw.writes, 1)), "ms/write")
	b.ReportMetric(gw.inflight/float64(n), "msgs_inflight")
}
