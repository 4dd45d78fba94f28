package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/sluicehq/sluice/internal/client"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/testenv"
	"github.com/sluicehq/sluice/internal/wire"
)

// TestSeveralGatewaysShape runs the deployment shape of several gateways
// from the real binaries and servers: gateways A (writer 1) and B (writer
// 2) on one Cassandra keyspace, rollups to one ClickHouse database, both in
// one MQTT shared subscription on Mosquitto. Producers write as a fleet
// behind a load balancer would:
//
//   - HTTP devices post NDJSON requests to A and B in turn; a request that
//     fails (refused, broken, not 202) is sent to the other gateway, and
//     every few requests one that was accepted is sent again to the other
//     gateway (a load balancer retry whose first answer was lost);
//   - MQTT devices publish at QoS 1; a message without a PUBACK is
//     published again, and every few messages one is published twice (the
//     device did not see its PUBACK).
//
// Gateway A is SIGKILLed while they write and restarted on its data_dir.
// Only 202s and PUBACKs count as acknowledged. Afterwards every
// acknowledged reading must be stored exactly once; the rollups in
// ClickHouse, combined over writers and parts as docs/data-model.md says,
// must equal a recompute from the raw readings by this test; and `query
// rollups verify` must be clean. The test rebuilds nothing.
//
// Devices stamp their readings with the wall clock, a few of them 25 or 50
// seconds late (devices that buffer), so that readings arrive for minutes
// already recomputed, and A holds minutes not yet recomputed when it is
// killed. Production stops at the first minute boundary
// at least form.produce after it began: every window can close as soon as
// it stops. -sluice.long writes more devices for longer and kills A twice.
func TestSeveralGatewaysShape(t *testing.T) {
	if testing.Short() {
		t.Skip("several gateways shape: about a minute of real servers, not in -short")
	}
	form := shapeShort
	if longForm() {
		form = shapeLong
	}
	env := cassandraEnv(t)
	testenv.Require(t, "mosquitto", testMosquitto)
	testenv.Require(t, "clickhouse", clickHouseAddr())
	testenv.LockClickHouse(t, false)

	prefix := fmt.Sprintf("e2e-shape-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000_000)
	database := strings.ReplaceAll(prefix, "-", "_")
	ch := openClickHouse(t, database)
	env = append(env,
		"SLUICE_ROLLUPS_CLICKHOUSE_ADDR="+clickHouseAddr(),
		"SLUICE_ROLLUPS_CLICKHOUSE_DATABASE="+database,
		fmt.Sprintf("SLUICE_ROLLUPS_ROLL_DELAY=%s", form.rollDelay),
	)
	if _, errOut, err := runBin(t, env, "ingest", "migrate"); err != nil {
		t.Fatalf("ingest migrate: %v\n%s", err, errOut)
	}
	// Registered before the gateways start, so that it runs after they
	// were killed: the broker forgets their persistent sessions.
	t.Cleanup(func() { forgetMQTTSessions(t, prefix+"-a", prefix+"-b") })

	gwEnv := func(name string, writer int) []string {
		return append(slices.Clone(env),
			fmt.Sprintf("SLUICE_BUCKETS_WRITER_ID=%d", writer),
			"SLUICE_MQTT_ENABLED=true",
			"SLUICE_MQTT_BROKERS=tcp://"+testMosquitto,
			"SLUICE_MQTT_CLIENT_ID="+prefix+"-"+name,
			"SLUICE_MQTT_SHARED_GROUP="+prefix,
			"SLUICE_MQTT_TENANT=acme",
			"SLUICE_MQTT_TOPICS="+prefix+"/devices/+/readings:1",
			"SLUICE_MQTT_TOPIC_TEMPLATE="+prefix+"/devices/{device_id}/readings",
			"SLUICE_MQTT_MAX_RECONNECT_INTERVAL=1s",
			// Commits wait a little, so that the kill lands between the
			// receipt of some requests and their acknowledgement.
			"SLUICE_SINK_LINGER=20ms",
		)
	}
	dataA, envA := t.TempDir(), gwEnv("a", 1)
	s := &shapeRun{form: form, prefix: prefix, http: &http.Client{Timeout: 20 * time.Second}}
	a := startGateway(t, dataA, envA...)
	b := startGateway(t, t.TempDir(), gwEnv("b", 2)...)
	s.gw[0].Store(a)
	s.gw[1].Store(b)
	a.waitLog("mqtt subscribed")
	b.waitLog("mqtt subscribed")

	// Production runs from now to a minute boundary, so that no stamp is
	// in the minute it ends in.
	s.start = time.Now()
	s.end = s.start.Add(form.produce + time.Minute - 1).Truncate(time.Minute)
	produce := s.end.Sub(s.start)
	t.Logf("producing for %s: %d HTTP and %d MQTT devices, a reading each per %s",
		produce.Round(time.Millisecond), form.httpDevices, form.mqttDevices, form.every)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // no producer outlives the test
	devices := form.httpDevices + form.mqttDevices
	produced := make([][]*shapeReading, devices)
	errs := make([]error, devices)
	for k := range form.httpDevices {
		wg.Go(func() { produced[k], errs[k] = s.produceHTTP(ctx, fmt.Sprintf("h%d", k), k) })
	}
	for k := form.httpDevices; k < devices; k++ {
		dev := fmt.Sprintf("m%d", k-form.httpDevices)
		c := shapeDevice(t, prefix+"-"+dev)
		wg.Go(func() { produced[k], errs[k] = s.produceMQTT(ctx, c, dev, k) })
	}

	// The kills, in this goroutine (it may fail the test), each while a
	// request to A is in progress if one starts within 5 s.
	for _, at := range form.kills {
		time.Sleep(time.Until(s.start.Add(time.Duration(at * float64(produce)))))
		for wait := time.Now().Add(5 * time.Second); s.inflight[0].Load() == 0 && time.Now().Before(wait); {
			time.Sleep(time.Millisecond)
		}
		s.gw[0].Load().kill()
		s.kills = append(s.kills, time.Now())
		t.Logf("gateway A killed at %s of production", time.Since(s.start).Round(time.Millisecond))
		time.Sleep(form.down)
		a = startGateway(t, dataA, envA...)
		s.gw[0].Store(a)
		a.waitLog("mqtt subscribed")
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("producers gave up:\n%v", err)
	}
	var all []*shapeReading
	for _, p := range produced {
		all = append(all, p...)
	}
	t.Logf("%d readings produced; HTTP: %d requests, %d sent to the other gateway after a failure, %d attempts broken mid-request, %d refused, %d accepted requests sent again to the other gateway; MQTT: %d publishes, %d without PUBACK, %d messages published twice",
		len(all), s.requests.Load(), s.failovers.Load(), s.broken.Load(), s.refused.Load(), s.lbRetries.Load(),
		s.publishes.Load(), s.noPuback.Load(), s.republishes.Load())
	if s.lbRetries.Load() == 0 || s.failovers.Load() == 0 || s.republishes.Load() == 0 {
		t.Fatalf("the run did not exercise the shape: %d load balancer retries, %d failovers, %d republished messages",
			s.lbRetries.Load(), s.failovers.Load(), s.republishes.Load())
	}

	// MQTT messages acknowledged by the broker reach a gateway later (those
	// queued for A while it was down, on its restart).
	waitMQTTStored(t, b, all, form.settle)

	// Every acknowledged reading stored exactly once, read with `query
	// readings` through B (it was never killed).
	first := s.end.UnixMilli()
	for _, r := range all {
		first = min(first, r.ts)
	}
	from, to := time.UnixMilli(first).Truncate(time.Minute), s.end.Add(time.Minute)
	raw := map[string][]model.Reading{}
	for k := range devices {
		dev := fmt.Sprintf("h%d", k)
		if k >= form.httpDevices {
			dev = fmt.Sprintf("m%d", k-form.httpDevices)
		}
		raw[dev] = queryReadings(t, b, dev, from, to)
	}
	checkRawOnce(t, all, raw)

	// The rollups, once both gateways delivered them.
	time.Sleep(time.Until(s.end.Add(form.rollDelay + 2*time.Second)))
	parts := waitRollupsDelivered(t, ch, database, []*gateway{s.gw[0].Load(), b}, form.settle)
	want := recompute(raw)
	compareRollups(t, s, all, want, parts)

	// Then the gateway's own check, day by day.
	cells := map[model.Day]int64{}
	for _, rs := range raw {
		for _, r := range rs {
			cells[model.DayOf(r.TS)] += int64(len(r.Metrics))
		}
	}
	for _, d := range slices.Sorted(maps.Keys(cells)) {
		checkVerify(t, b, d, cells[d])
	}
	s.gw[0].Load().stop()
	b.stop()
}

// shapeForm is the size of one run.
type shapeForm struct {
	httpDevices, mqttDevices int
	every                    time.Duration // between two readings of a device
	produce                  time.Duration // how long the producers write at least
	kills                    []float64     // when A is killed, as fractions of produce
	down                     time.Duration // how long A stays down
	lbRetryEvery             int           // every n-th accepted request goes again to the other gateway
	republishEvery           int           // every n-th MQTT message is published twice
	rollDelay                time.Duration // rollups.roll_delay
	settle                   time.Duration // the most to wait for deliveries after production
}

var (
	shapeShort = shapeForm{httpDevices: 6, mqttDevices: 4, every: time.Second, produce: 20 * time.Second,
		kills: []float64{0.4}, down: 3 * time.Second, lbRetryEvery: 4, republishEvery: 10, rollDelay: 2 * time.Second,
		settle: 60 * time.Second}
	shapeLong = shapeForm{httpDevices: 16, mqttDevices: 8, every: 200 * time.Millisecond, produce: 4 * time.Minute,
		kills: []float64{0.3, 0.65}, down: 10 * time.Second, lbRetryEvery: 4, republishEvery: 10, rollDelay: 2 * time.Second,
		settle: 3 * time.Minute}
)

// shapeReading is one reading the test produced, and what became of it.
type shapeReading struct {
	device string
	k      int // the device's index
	seq    int
	ts     int64 // ms
	t, p   float64
	mqtt   bool
	// acked counts the 202s from gateways A and B (HTTP), or the PUBACKs
	// in acked[0] (MQTT).
	acked [2]int
	// unknown counts the attempts that ended without an answer, so may or
	// may not have been stored: an HTTP request broken mid-way (the kill),
	// an MQTT publish without a PUBACK.
	unknown int
}

func (r *shapeReading) json() string {
	return fmt.Sprintf(`{"device_id":%q,"ts":%q,"seq":%d,"metrics":{"t":%v,"p":%v}}`,
		r.device, wire.FormatTS(r.ts), r.seq, r.t, r.p)
}

func (r *shapeReading) isAcked() bool { return r.acked[0]+r.acked[1] > 0 }

// shapeRun is the state the producers share.
type shapeRun struct {
	form   shapeForm
	prefix string
	http   *http.Client
	gw     [2]atomic.Pointer[gateway] // A (replaced at its restart) and B
	start  time.Time                  // of production
	end    time.Time                  // of production, a minute boundary
	kills  []time.Time                // when A was killed
	// inflight counts the requests being posted to A and B.
	inflight [2]atomic.Int64

	requests, failovers, broken, refused, lbRetries atomic.Int64
	publishes, noPuback, republishes                atomic.Int64
}

// lag is how late device k stamps its readings: most devices on time, a
// few buffering.
func lag(k int) time.Duration {
	return []time.Duration{0, 25 * time.Second, 0, 50 * time.Second, 0}[k%5]
}

// tick waits for the i-th reading of device k and returns its stamp, or
// false when production is over. Stamps also jitter by up to 0.9 s.
func (s *shapeRun) tick(ctx context.Context, k, i int, prev int64) (int64, bool) {
	stagger := s.form.every * time.Duration(k) / time.Duration(s.form.httpDevices+s.form.mqttDevices)
	at := s.start.Add(time.Duration(i)*s.form.every + stagger)
	if !at.Before(s.end) {
		return 0, false
	}
	select {
	case <-ctx.Done():
		return 0, false
	case <-time.After(time.Until(at)):
	}
	jitter := time.Duration((i*137+k*59)%900) * time.Millisecond
	return max(time.Now().Add(-lag(k)-jitter).UnixMilli(), prev+1), true
}

// values are a reading's metrics: fractions, so that sums round.
func values(k, seq int) (float64, float64) {
	return 18 + float64((seq*7+k)%41)*0.37, 1000.5 + float64(seq)*0.013 + float64(k)
}

// produceHTTP writes device dev's readings in requests of 1 to 3 lines.
func (s *shapeRun) produceHTTP(ctx context.Context, dev string, k int) ([]*shapeReading, error) {
	var out, batch []*shapeReading
	var prev int64
	req := 0
	for i := 0; ; i++ {
		ts, ok := s.tick(ctx, k, i, prev)
		if ok {
			t, p := values(k, i)
			r := &shapeReading{device: dev, k: k, seq: i, ts: ts, t: t, p: p}
			out, batch, prev = append(out, r), append(batch, r), ts
		}
		if len(batch) == 0 || ok && len(batch) < 1+req%3 {
			if !ok {
				return out, ctx.Err()
			}
			continue
		}
		lbRetry := req%s.form.lbRetryEvery == s.form.lbRetryEvery-1
		if err := s.sendHTTP(ctx, (k+req)%2, batch, lbRetry); err != nil {
			return out, fmt.Errorf("device %s: %w", dev, err)
		}
		batch, req = nil, req+1
		if !ok {
			return out, nil
		}
	}
}

// sendHTTP posts batch to gateway first, and on any failure to the other
// gateway, until one accepts it; with lbRetry it then posts it once more to
// the gateway that did not accept it.
func (s *shapeRun) sendHTTP(ctx context.Context, first int, batch []*shapeReading, lbRetry bool) error {
	var body bytes.Buffer
	for _, r := range batch {
		body.WriteString(r.json() + "\n")
	}
	s.requests.Add(1)
	target := first
	for attempt := 0; ; attempt++ {
		status, err := s.post(ctx, target, body.Bytes())
		if status == http.StatusAccepted {
			for _, r := range batch {
				r.acked[target]++
			}
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if status >= 400 && status < 500 && status != http.StatusTooManyRequests {
			return fmt.Errorf("readings %d..%d: answered %d: %v", batch[0].seq, batch[len(batch)-1].seq, status, err)
		}
		if attempt == 30 {
			return fmt.Errorf("readings %d..%d not accepted after %d attempts: %d %v", batch[0].seq, batch[len(batch)-1].seq, attempt+1, status, err)
		}
		if attempt == 0 {
			s.failovers.Add(1)
		}
		if status == 0 && !errors.Is(err, syscall.ECONNREFUSED) {
			s.broken.Add(1)
			for _, r := range batch {
				r.unknown++
			}
		} else if status == 0 {
			s.refused.Add(1)
		}
		target = 1 - target
		time.Sleep(time.Duration(min(attempt, 10)) * 100 * time.Millisecond)
	}
	if !lbRetry {
		return nil
	}
	s.lbRetries.Add(1)
	other := 1 - target
	status, err := s.post(ctx, other, body.Bytes())
	for _, r := range batch {
		if status == http.StatusAccepted {
			r.acked[other]++
		} else if status == 0 && !errors.Is(err, syscall.ECONNREFUSED) {
			r.unknown++
		}
	}
	return nil
}

// post sends an NDJSON body to gateway i (0 is A) and returns the status,
// 0 when there was no answer.
func (s *shapeRun) post(ctx context.Context, i int, body []byte) (int, error) {
	s.inflight[i].Add(1)
	defer s.inflight[i].Add(-1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.gw[i].Load().url+"/v1/readings", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var msg bytes.Buffer
	_, _ = msg.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return resp.StatusCode, fmt.Errorf("%s", strings.TrimSpace(msg.String()))
	}
	return resp.StatusCode, nil
}

// shapeDevice connects an MQTT device to the test Mosquitto.
func shapeDevice(t *testing.T, clientID string) mqtt.Client {
	t.Helper()
	o := mqtt.NewClientOptions().AddBroker("tcp://" + testMosquitto).SetClientID(clientID).
		SetCleanSession(true).SetAutoReconnect(true).SetConnectTimeout(5 * time.Second).SetWriteTimeout(5 * time.Second)
	c := mqtt.NewClient(o)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("device %s: connect to %s: %v", clientID, testMosquitto, tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

// produceMQTT publishes device dev's readings at QoS 1, each until the
// broker acknowledges it.
func (s *shapeRun) produceMQTT(ctx context.Context, c mqtt.Client, dev string, k int) ([]*shapeReading, error) {
	topic := s.prefix + "/devices/" + dev + "/readings"
	publish := func(r *shapeReading) {
		s.publishes.Add(1)
		if tok := c.Publish(topic, 1, false, r.json()); tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
			r.acked[0]++
		} else {
			s.noPuback.Add(1)
			r.unknown++
		}
	}
	var out []*shapeReading
	var prev int64
	for i := 0; ; i++ {
		ts, ok := s.tick(ctx, k, i, prev)
		if !ok {
			return out, ctx.Err()
		}
		t, p := values(k, i)
		r := &shapeReading{device: dev, k: k, seq: i, ts: ts, t: t, p: p, mqtt: true}
		out, prev = append(out, r), ts
		for attempt := 0; r.acked[0] == 0; attempt++ {
			if attempt == 10 || ctx.Err() != nil {
				return out, fmt.Errorf("device %s: reading %d: no PUBACK after %d publishes", dev, i, attempt)
			}
			publish(r)
		}
		if i%s.form.republishEvery == s.form.republishEvery-1 {
			s.republishes.Add(1)
			publish(r)
		}
	}
}

// forgetMQTTSessions removes the persistent sessions of the gateways'
// client ids from the shared broker: a clean session replaces them.
func forgetMQTTSessions(t *testing.T, ids ...string) {
	for _, id := range ids {
		o := mqtt.NewClientOptions().AddBroker("tcp://" + testMosquitto).SetClientID(id).SetCleanSession(true).
			SetConnectTimeout(5 * time.Second)
		c := mqtt.NewClient(o)
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Logf("forget the MQTT session %s: %v", id, tok.Error())
			continue
		}
		c.Disconnect(0)
	}
}

// waitMQTTStored waits until every MQTT reading the broker acknowledged
// can be read through g; it returns at the deadline all the same (the
// exact check then names what is missing).
func waitMQTTStored(t *testing.T, g *gateway, all []*shapeReading, wait time.Duration) {
	t.Helper()
	want := map[string]map[int64]bool{}
	for _, r := range all {
		if r.mqtt && r.isAcked() {
			if want[r.device] == nil {
				want[r.device] = map[int64]bool{}
			}
			want[r.device][r.ts] = true
		}
	}
	c := g.client()
	deadline := time.Now().Add(wait)
	for {
		missing := 0
		for dev, tss := range want {
			seen := 0
			for page, err := range c.ReadingPages(context.Background(), client.ReadingsQuery{Device: dev,
				Range: client.Range{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Minute), Limit: 1000}}) {
				if err != nil {
					t.Fatalf("read %s through gateway B: %v", dev, err)
				}
				for _, r := range page.Readings {
					if tss[r.TS] {
						seen++
					}
				}
			}
			missing += len(tss) - min(seen, len(tss))
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("%d MQTT readings acknowledged by the broker still not stored after %s", missing, wait)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// queryReadings reads a device's readings with `query readings --all`.
func queryReadings(t *testing.T, g *gateway, dev string, from, to time.Time) []model.Reading {
	t.Helper()
	out, _ := g.query("readings", "--device", dev, "--from", from.UTC().Format(time.RFC3339),
		"--to", to.UTC().Format(time.RFC3339), "--all", "--max-rows", "1000000", "--format", "json")
	var page wire.ReadingsPage
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("query readings --device %s: %v\n%s", dev, err, head(out))
	}
	if page.NextCursor != "" {
		t.Fatalf("query readings --device %s --all stopped before the end", dev)
	}
	rs := make([]model.Reading, 0, len(page.Readings))
	for _, w := range page.Readings {
		ts, err := wire.ParseTS(w.TS)
		if err != nil {
			t.Fatalf("query readings --device %s: %v", dev, err)
		}
		r := model.Reading{DeviceID: cmp.Or(w.DeviceID, dev), TS: ts}
		if w.Seq != nil {
			r.Seq, r.HasSeq = *w.Seq, true
		}
		for _, name := range slices.Sorted(maps.Keys(w.Metrics)) {
			m := model.Metric(w.Metrics[name])
			m.Name = name
			r.Metrics = append(r.Metrics, m)
		}
		rs = append(rs, r)
	}
	return rs
}

// checkRawOnce checks that every acknowledged reading is stored once with
// the values sent, and that nothing else is stored.
func checkRawOnce(t *testing.T, all []*shapeReading, raw map[string][]model.Reading) {
	t.Helper()
	type key struct {
		device string
		ts     int64
	}
	stored := map[key][]model.Reading{}
	rows := 0
	for dev, rs := range raw {
		for _, r := range rs {
			stored[key{dev, r.TS}] = append(stored[key{dev, r.TS}], r)
			rows++
		}
	}
	var problems []string
	unacked := 0
	for _, r := range all {
		got := stored[key{r.device, r.ts}]
		delete(stored, key{r.device, r.ts})
		switch {
		case len(got) == 0 && r.isAcked():
			problems = append(problems, fmt.Sprintf("device %s reading %d (%s): acknowledged %v, not stored", r.device, r.seq, wire.FormatTS(r.ts), r.acked))
		case len(got) == 0:
			// Never acknowledged and not stored: the producer gave up on it.
		case len(got) > 1:
			problems = append(problems, fmt.Sprintf("device %s reading %d (%s): stored %d times", r.device, r.seq, wire.FormatTS(r.ts), len(got)))
		case !r.isAcked():
			unacked++ // stored by an attempt that got no answer: allowed
		}
		if len(got) > 0 {
			g := got[0]
			want := []model.Metric{{Name: "p", Value: r.p}, {Name: "t", Value: r.t}}
			if !g.HasSeq || g.Seq != int64(r.seq) || !slices.Equal(g.Metrics, want) {
				problems = append(problems, fmt.Sprintf("device %s reading %d (%s): stored seq %d metrics %v, sent %v",
					r.device, r.seq, wire.FormatTS(r.ts), g.Seq, g.Metrics, want))
			}
		}
	}
	for k, rs := range stored {
		problems = append(problems, fmt.Sprintf("device %s %s: stored %d times, never sent", k.device, wire.FormatTS(k.ts), len(rs)))
	}
	t.Logf("raw: %d readings stored for %d produced; %d stored without an acknowledgement", rows, len(all), unacked)
	if len(problems) > 0 {
		slices.Sort(problems)
		t.Errorf("raw readings not exactly once (%d problems):\n%s", len(problems), strings.Join(firstN(problems, 40), "\n"))
	}
}

func firstN(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	return append(lines[:n:n], fmt.Sprintf("… and %d more", len(lines)-n))
}

// window is one rollup window: (device, metric, minute).
type window struct {
	device, metric string
	minute         int64 // ms
}

// aggregate is what a window's rollup holds.
type aggregate struct {
	count           uint64
	sum, min, max   float64
	firstTS, lastTS int64
	first, last     float64
	parts           []chPart // the ClickHouse rows combined into it
}

func (a *aggregate) add(ts int64, v float64) {
	if a.count == 0 || ts < a.firstTS {
		a.firstTS, a.first = ts, v
	}
	if a.count == 0 || ts > a.lastTS {
		a.lastTS, a.last = ts, v
	}
	if a.count == 0 {
		a.min, a.max = v, v
	}
	a.count++
	a.sum += v
	a.min, a.max = min(a.min, v), max(a.max, v)
}

// recompute aggregates the raw readings into minute windows.
func recompute(raw map[string][]model.Reading) map[window]*aggregate {
	out := map[window]*aggregate{}
	for dev, rs := range raw {
		for _, r := range rs {
			for _, m := range r.Metrics {
				w := window{dev, m.Name, r.TS - r.TS%60_000}
				if out[w] == nil {
					out[w] = &aggregate{}
				}
				out[w].add(r.TS, m.Value)
			}
		}
	}
	return out
}

// chPart is one live row of rollups_1m (latest version, not a tombstone).
type chPart struct {
	device, metric    string
	minute            int64 // ms
	writer            uint16
	part              uint64
	count             uint64
	sum, min, max     float64
	firstTS, lastTS   int64
	firstVal, lastVal float64
}

func openClickHouse(t *testing.T, database string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{clickHouseAddr()},
		Auth: clickhouse.Auth{Database: "default", Username: "default"}, DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+database); err != nil {
			t.Errorf("drop clickhouse database %s: %v", database, err)
		}
		_ = conn.Close()
	})
	return conn
}

// readParts reads the live rows of the test's table: the latest version of
// every (tenant, metric, device, minute, writer, part) through FINAL, the
// filter on count outside it, tombstones (count 0) skipped.
func readParts(ctx context.Context, ch driver.Conn, database string) ([]chPart, error) {
	rows, err := ch.Query(ctx, `SELECT device, metric, minute, writer, part, count, sum, min, max, first_ts, first_value, last_ts, last_value
FROM (SELECT * FROM `+database+`.rollups_1m FINAL WHERE tenant = ?) WHERE count > 0
ORDER BY device, metric, minute, writer, part`, "acme")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []chPart
	for rows.Next() {
		var p chPart
		var m time.Time
		if err := rows.Scan(&p.device, &p.metric, &m, &p.writer, &p.part, &p.count, &p.sum, &p.min, &p.max,
			&p.firstTS, &p.firstVal, &p.lastTS, &p.lastVal); err != nil {
			return nil, err
		}
		p.minute = m.UnixMilli()
		out = append(out, p)
	}
	return out, rows.Err()
}

// outboxRows asks a gateway how many rollup rows wait in its outbox, and
// which days it marked dirty.
func outboxRows(g *gateway) (int, []string, error) {
	req, err := http.NewRequest(http.MethodGet, g.url+"/v1/rollups/status", nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var st struct {
		OutboxRows int      `json:"outbox_rows"`
		DirtyDays  []string `json:"dirty_days"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, nil, fmt.Errorf("GET /v1/rollups/status: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, nil, err
	}
	return st.OutboxRows, st.DirtyDays, nil
}

// waitRollupsDelivered waits until both gateways' outboxes are empty and
// ClickHouse's live rows stayed the same over two polls, and returns them.
func waitRollupsDelivered(t *testing.T, ch driver.Conn, database string, gws []*gateway, wait time.Duration) []chPart {
	t.Helper()
	deadline := time.Now().Add(wait)
	var prev []chPart
	dirty := map[string]bool{}
	defer func() {
		if len(dirty) > 0 {
			t.Errorf("gateways marked days dirty (rows left out of their rollups): %v", slices.Sorted(maps.Keys(dirty)))
		}
	}()
	for {
		depths := make([]int, len(gws))
		var errs []error
		for i, g := range gws {
			n, days, err := outboxRows(g)
			depths[i] = n
			errs = append(errs, err)
			for _, d := range days {
				dirty[fmt.Sprintf("gateway %c: %s", 'A'+i, d)] = true
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		parts, err := readParts(ctx, ch, database)
		cancel()
		errs = append(errs, err)
		empty := !slices.ContainsFunc(depths, func(n int) bool { return n > 0 })
		if err := errors.Join(errs...); err == nil && empty {
			if prev != nil && slices.Equal(prev, parts) {
				t.Logf("rollups delivered: %d live rows in clickhouse", len(parts))
				return parts
			}
			prev = parts
		} else {
			prev = nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollups not delivered within %s: outbox rows A %d, B %d; clickhouse live rows %d (previous poll %d); errors: %v",
				wait, depths[0], depths[1], len(parts), len(prev), errors.Join(errs...))
		}
		time.Sleep(2 * time.Second)
	}
}

// compareRollups combines ClickHouse's parts per window and compares them
// with the recompute from raw; each difference names the window, both
// values, the parts and what the producers did to the window's readings.
func compareRollups(t *testing.T, s *shapeRun, all []*shapeReading, want map[window]*aggregate, parts []chPart) {
	t.Helper()
	got := map[window]*aggregate{}
	writers := map[uint16]int{}
	for _, p := range parts {
		w := window{p.device, p.metric, p.minute}
		writers[p.writer]++
		a := got[w]
		if a == nil {
			a = &aggregate{firstTS: p.firstTS, first: p.firstVal, lastTS: p.lastTS, last: p.lastVal, min: p.min, max: p.max}
			got[w] = a
		}
		a.count += p.count
		a.sum += p.sum
		a.min, a.max = min(a.min, p.min), max(a.max, p.max)
		if p.firstTS < a.firstTS {
			a.firstTS, a.first = p.firstTS, p.firstVal
		}
		if p.lastTS > a.lastTS {
			a.lastTS, a.last = p.lastTS, p.lastVal
		}
		a.parts = append(a.parts, p)
	}
	t.Logf("clickhouse: %d live rows in %d windows (rows by writer: %v); raw recompute: %d windows", len(parts), len(got), writers, len(want))

	causes := windowCauses(s, all)
	keys := map[window]bool{}
	for w := range want {
		keys[w] = true
	}
	for w := range got {
		keys[w] = true
	}
	sorted := slices.SortedFunc(maps.Keys(keys), func(a, b window) int {
		return cmp.Or(cmp.Compare(a.device, b.device), cmp.Compare(a.metric, b.metric), cmp.Compare(a.minute, b.minute))
	})
	days := map[model.Day]bool{}
	for w := range keys {
		days[model.DayOf(w.minute)] = true
	}
	minuteFormat := "15:04"
	if len(days) > 1 {
		minuteFormat = "2006-01-02 15:04"
	}
	// Lines by kind, so that a long run shows examples of each.
	var higher, lower, other []string
	var higherExplained, lowerExplained int
	for _, w := range sorted {
		g, r := got[w], want[w]
		name := fmt.Sprintf("device %s metric %s minute %s", w.device, w.metric, time.UnixMilli(w.minute).UTC().Format(minuteFormat))
		c := causes[window{w.device, "", w.minute}]
		var diffs []string
		switch {
		case r == nil:
			diffs = append(diffs, fmt.Sprintf("clickhouse count %d, no raw readings", g.count))
		case g == nil:
			diffs = append(diffs, fmt.Sprintf("no rollup in clickhouse, raw count %d", r.count))
		default:
			diffs = aggregateDiffs(g, r)
		}
		if len(diffs) == 0 {
			continue
		}
		gc, rc := uint64(0), uint64(0)
		if g != nil {
			gc = g.count
		}
		if r != nil {
			rc = r.count
		}
		line := name + ": " + strings.Join(diffs, "; ")
		if g != nil {
			var ps []string
			for _, p := range g.parts {
				ps = append(ps, fmt.Sprintf("%d/%d:%d", p.writer, p.part, p.count))
			}
			line += " (parts writer/part:count " + strings.Join(ps, " ") + ")"
		}
		if note := c.String(); note != "" {
			line += " [" + note + "]"
		}
		switch {
		case gc > rc:
			higher = append(higher, line)
			if c.both+c.twice+c.unknown > 0 {
				higherExplained++
			}
		case gc < rc:
			lower = append(lower, line)
			if c.openAtKill {
				lowerExplained++
			}
		default:
			other = append(other, line)
		}
	}
	if n := len(higher) + len(lower) + len(other); n > 0 {
		var b strings.Builder
		fmt.Fprintf(&b, "clickhouse rollups differ from the recompute from raw in %d of %d windows:", n, len(keys))
		for _, kind := range []struct {
			name  string
			lines []string
		}{
			{fmt.Sprintf("count higher (%d of them with a reading delivered to both gateways, published twice or sent at a kill)", higherExplained), higher},
			{fmt.Sprintf("count lower (%d of them open on gateway A when it was killed)", lowerExplained), lower},
			{"count equal, other fields differ", other},
		} {
			if len(kind.lines) > 0 {
				fmt.Fprintf(&b, "\n%d windows with %s:\n%s", len(kind.lines), kind.name, strings.Join(firstN(kind.lines, 15), "\n"))
			}
		}
		t.Error(b.String())
	}
}

// aggregateDiffs names the fields of g (ClickHouse) that differ from r
// (raw); sums are compared with a relative tolerance.
func aggregateDiffs(g, r *aggregate) []string {
	var d []string
	if g.count != r.count {
		d = append(d, fmt.Sprintf("clickhouse count %d, raw %d", g.count, r.count))
	}
	if math.Abs(g.sum-r.sum) > 1e-9*max(1, math.Abs(r.sum)) {
		d = append(d, fmt.Sprintf("clickhouse sum %v, raw %v", g.sum, r.sum))
	}
	if g.min != r.min {
		d = append(d, fmt.Sprintf("clickhouse min %v, raw %v", g.min, r.min))
	}
	if g.max != r.max {
		d = append(d, fmt.Sprintf("clickhouse max %v, raw %v", g.max, r.max))
	}
	if g.firstTS != r.firstTS || g.first != r.first {
		d = append(d, fmt.Sprintf("clickhouse first %v at %s, raw %v at %s", g.first, wire.FormatTS(g.firstTS), r.first, wire.FormatTS(r.firstTS)))
	}
	if g.lastTS != r.lastTS || g.last != r.last {
		d = append(d, fmt.Sprintf("clickhouse last %v at %s, raw %v at %s", g.last, wire.FormatTS(g.lastTS), r.last, wire.FormatTS(r.lastTS)))
	}
	return d
}

// causes says what the producers did to the readings of one device-minute.
type causes struct {
	both       int  // HTTP readings acknowledged by both gateways
	twice      int  // MQTT readings published more than once
	unknown    int  // HTTP readings in a request broken mid-way, then sent again
	openAtKill bool // the minute's window was open on A when it was killed
}

func (c causes) String() string {
	var n []string
	if c.both > 0 {
		n = append(n, nReadings(c.both)+" acknowledged by both gateways")
	}
	if c.twice > 0 {
		n = append(n, nReadings(c.twice)+" published twice")
	}
	if c.unknown > 0 {
		n = append(n, nReadings(c.unknown)+" in a request that got no answer (broken by a kill)")
	}
	if c.openAtKill {
		n = append(n, "window open on gateway A when it was killed")
	}
	return strings.Join(n, ", ")
}

func nReadings(n int) string {
	if n == 1 {
		return "1 reading"
	}
	return fmt.Sprintf("%d readings", n)
}

// windowCauses indexes causes by (device, "", minute).
func windowCauses(s *shapeRun, all []*shapeReading) map[window]causes {
	out := map[window]causes{}
	lags := map[string]time.Duration{}
	for _, r := range all {
		lags[r.device] = lag(r.k)
		w := window{r.device, "", r.ts - r.ts%60_000}
		c := out[w]
		switch {
		case !r.mqtt && r.acked[0] > 0 && r.acked[1] > 0:
			c.both++
		case r.mqtt && r.acked[0]+r.unknown > 1:
			c.twice++
		}
		if !r.mqtt && r.unknown > 0 {
			c.unknown++
		}
		out[w] = c
	}
	// A minute may wait for its recompute on A from its first reading
	// until its end plus rollups.roll_delay: flagged in the messages.
	for w, c := range out {
		for _, k := range s.kills {
			if w.minute <= k.Add(-lags[w.device]).UnixMilli() && time.UnixMilli(w.minute+60_000).Add(s.form.rollDelay).After(k) {
				c.openAtKill = true
			}
		}
		out[w] = c
	}
	return out
}

// checkVerify runs `query rollups verify` for day through g and requires
// it clean, over as many raw readings as the test read.
func checkVerify(t *testing.T, g *gateway, day model.Day, cells int64) {
	t.Helper()
	args := []string{"rollups", "verify", "--day", day.String(), "--format", "json"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "query"), args...)
	cmd.Env = append(os.Environ(), "SLUICE_URL="+g.url, "SLUICE_TOKEN="+token)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Errorf("query %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, head(out.String()), strings.TrimSpace(errb.String()))
		return
	}
	var v wire.Verification
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Errorf("query %s: %v\n%s", strings.Join(args, " "), err, head(out.String()))
		return
	}
	if len(v.Mismatches) > 0 || v.RawRows != cells || v.RollupRows != cells {
		t.Errorf("query %s: raw_rows %d, rollup_rows %d (the test read %d raw metric values), mismatches %+v",
			strings.Join(args, " "), v.RawRows, v.RollupRows, cells, v.Mismatches)
	}
}
