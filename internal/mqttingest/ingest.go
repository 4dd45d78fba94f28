// Package mqttingest stores the readings that devices publish over MQTT, at
// least once: a message is acknowledged (PUBACK) only after its rows, or its
// dead letter, are durable in the store. There are two ways in, sharing the
// decoding of a message (topic template, tenant, limits, dead letters):
//
//   - Ingester subscribes to an external broker (below).
//   - Receiver stores each message the embedded broker (package broker)
//     hands it from its publish hook, before the broker acknowledges the
//     device; see Receiver.
//
// # Delivery (Ingester)
//
// The client keeps a persistent session (clean session off, a stable client
// id), subscribes at the configured QoS and turns automatic acknowledgement
// off. A message the gateway has not acknowledged when it stops or crashes
// stays with the broker, which sends it again on the next connection; keys
// are idempotent (device, timestamp, metric), so a second copy overwrites the
// first.
//
// MQTT 3.1.1 asks a client to acknowledge QoS 1 messages in the order it
// received them, and paho sends each Ack at once, in whatever order it is
// called. So messages are acknowledged by one goroutine, the acker, in
// receive order: it waits until the oldest message is durable, acknowledges
// it, and moves to the next. Writes still run concurrently.
//
// # Flow control (Ingester)
//
//  1. paho calls the handler for each message, one at a time (order
//     matters). The handler appends the message to the in-flight queue,
//     which holds at most Config.MaxInflight messages received and not yet
//     acknowledged; when it is full the handler blocks, paho stops reading
//     the connection, and the broker holds the rest.
//  2. The processor takes the messages waiting, decodes them (a message
//     that cannot be stored becomes a dead letter), groups them by tenant
//     and starts a write; at most maxWrites run at once.
//  3. A write first waits, one tenant's request at a time, until the tenant
//     is within its quotas (SetLimiter); the wait holds the write's slot, so
//     a tenant over quota slows the subscription, and, since messages are
//     acknowledged in receive order, the messages received after its own.
//     Then it calls the sink. When the sink is busy, or fails, the write is
//     retried with backoff; its messages are never acknowledged before the
//     sink returns nil, and never dropped.
//  4. The acker acknowledges in receive order (above).
package mqttingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/decode"
	"github.com/sluicehq/sluice/internal/sink"
)

// Writer is the write pipeline; Write returns nil only once the request is
// durable.
type Writer interface {
	Write(ctx context.Context, req *sink.Request) error
}

// maxWrites is how many batches are written at once; maxBatch is the most
// messages one batch takes.
const (
	maxWrites = 4
	maxBatch  = 1024
)

// Ingester is one MQTT subscription feeding the sink. Create it with New,
// start it with Start, stop it with Stop.
type Ingester struct {
	core
	cfg Config

	client   mqtt.Client
	inflight chan *item    // receive order; with the one the acker holds, at most MaxInflight
	work     chan *item    // received, not yet taken by the processor
	slots    chan struct{} // write slots
	writes   sync.WaitGroup

	mu       sync.Mutex // guards stopping and sends on work
	stopping bool
	stop     chan struct{} // closed when Stop begins
	procDone chan struct{} // closed when the processor exited
	ackDone  chan struct{} // closed when the acker exited
	ctx      context.Context
	cancel   context.CancelFunc
	// quotaCtx bounds the waits for a tenant's quotas: it ends when Stop
	// begins, since a write not started yet is not worth waiting for (its
	// messages stay with the broker), unlike one in progress.
	quotaCtx    context.Context
	quotaCancel context.CancelFunc

	subscribed     chan struct{} // closed after the first subscription succeeded
	subscribedOnce sync.Once
	killed         atomic.Bool

	// openConn, when set (tests), dials the broker.
	openConn func(uri *url.URL, opts mqtt.ClientOptions) (net.Conn, error)
}

type item struct {
	msg  mqtt.Message
	recv time.Time
	ok   bool          // stored; written before done is closed
	done chan struct{} // closed once stored or abandoned
}

func (it *item) finish(ok bool) {
	it.ok = ok
	close(it.done)
}

// New returns an ingester; cfg must be valid. now is the clock for receive
// times and the future-timestamp limit.
func New(cfg Config, w Writer, lim decode.Limits, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) (*Ingester, error) {
	c, err := newCore(cfg, w, lim, now, logger, reg, true)
	if err != nil {
		return nil, err
	}
	in := &Ingester{
		core: c, cfg: cfg,
		// The acker holds one message out of inflight while it waits for it.
		inflight: make(chan *item, cfg.MaxInflight-1), work: make(chan *item, cfg.MaxInflight),
		slots: make(chan struct{}, maxWrites), stop: make(chan struct{}), procDone: make(chan struct{}),
		ackDone: make(chan struct{}), subscribed: make(chan struct{}),
	}
	in.ctx, in.cancel = context.WithCancel(context.Background())
	in.quotaCtx, in.quotaCancel = context.WithCancel(in.ctx)
	return in, nil
}

// Start connects in the background (retrying until the broker answers) and
// starts processing. It returns an error only for a bad TLS setup.
func (in *Ingester) Start() error {
	tc, err := in.cfg.TLS.TLSConfig()
	if err != nil {
		return err
	}
	o := mqtt.NewClientOptions()
	for _, b := range in.cfg.Brokers {
		o.AddBroker(b)
	}
	o.SetClientID(in.cfg.ClientIDOrDefault())
	o.SetUsername(in.cfg.Username)
	o.SetPassword(in.cfg.Password)
	o.SetCleanSession(false)
	o.SetOrderMatters(true) // one handler call at a time: blocking it is the back-pressure
	o.SetAutoAckDisabled(true)
	o.SetResumeSubs(true)
	o.SetKeepAlive(in.cfg.KeepAlive)
	o.SetPingTimeout(10 * time.Second)
	o.SetConnectTimeout(in.cfg.ConnectTimeout)
	o.SetWriteTimeout(in.cfg.ConnectTimeout)
	o.SetAutoReconnect(true)
	o.SetMaxReconnectInterval(in.cfg.MaxReconnectInterval)
	o.SetConnectRetry(true)
	o.SetConnectRetryInterval(in.cfg.ConnectRetryInterval)
	if tc != nil {
		o.SetTLSConfig(tc)
	}
	open := dialBroker
	if in.openConn != nil {
		open = in.openConn
	}
	o.SetCustomOpenConnectionFn(func(u *url.URL, o mqtt.ClientOptions) (net.Conn, error) {
		c, err := open(u, o)
		if err != nil {
			return nil, err
		}
		return newBufConn(c, in.cfg.ConnectTimeout), nil
	})
	o.SetDefaultPublishHandler(in.handle)
	o.SetOnConnectHandler(func(c mqtt.Client) {
		in.m.connects.Inc()
		in.m.connected.Set(1)
		go in.subscribe(c)
	})
	o.SetConnectionLostHandler(func(_ mqtt.Client, err error) {
		in.m.connected.Set(0)
		in.m.connLost.Inc()
		in.logger.Warn("mqtt connection lost; reconnecting (messages not acknowledged will come again)", "err", err)
	})
	o.SetReconnectingHandler(func(_ mqtt.Client, _ *mqtt.ClientOptions) {
		in.logger.Info("mqtt reconnecting", "brokers", in.cfg.Brokers)
	})
	in.client = mqtt.NewClient(o)
	go in.process()
	go in.acker()
	in.client.Connect() // with ConnectRetry the token completes only once connected
	in.logger.Info("mqtt ingest started", "brokers", in.cfg.Brokers, "client_id", in.cfg.ClientIDOrDefault(),
		"filters", in.cfg.Filters(), "topic_template", in.cfg.TopicTemplate, "max_inflight", in.cfg.MaxInflight)
	return nil
}

// Subscribed is closed once the first subscription was confirmed.
func (in *Ingester) Subscribed() <-chan struct{} { return in.subscribed }

// subscribe (re)establishes the subscriptions after each connection. With
// a persistent session the broker usually still has them; subscribing
// again is harmless and covers a broker that lost its state.
func (in *Ingester) subscribe(c mqtt.Client) {
	wait := time.Second
	for {
		tok := c.SubscribeMultiple(in.cfg.Filters(), nil)
		err := errors.New("timed out")
		if tok.WaitTimeout(in.cfg.ConnectTimeout) {
			err = tok.Error()
		}
		if err == nil {
			if st, ok := tok.(*mqtt.SubscribeToken); ok {
				for f, q := range st.Result() {
					if q == 0x80 {
						err = fmt.Errorf("broker refused the subscription to %q (check its ACL)", f)
					}
				}
			}
		}
		if err == nil {
			in.logger.Info("mqtt subscribed", "filters", in.cfg.Filters())
			in.subscribedOnce.Do(func() { close(in.subscribed) })
			return
		}
		in.logger.Error("mqtt subscribe", "filters", in.cfg.Filters(), "err", err, "retry_in", wait)
		select {
		case <-in.stop:
			return
		case <-time.After(wait):
		}
		if !c.IsConnectionOpen() {
			return // the next connection subscribes again
		}
		wait = min(2*wait, in.cfg.MaxReconnectInterval)
	}
}

// handle runs on paho's router goroutine, once per message, in receive
// order. Blocking here stops paho reading from the broker.
func (in *Ingester) handle(_ mqtt.Client, msg mqtt.Message) {
	if in.killed.Load() {
		return
	}
	it := &item{msg: msg, recv: in.now(), done: make(chan struct{})}
	// Queued under mu, which the processor takes to set stopping before it
	// exits: so every message queued reaches the acker (which drains the
	// queue after the processor exited), and none is queued after.
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopping {
		return // not acknowledged: the broker keeps it
	}
	select {
	case in.inflight <- it:
	case <-in.stop: // a full queue waits for the acker, unless Stop began
		return
	}
	in.m.inflight.Inc() // the acker counts it out
	in.work <- it       // never blocks: work holds no more than the in-flight bound
}

// acker acknowledges messages in receive order once each is durable.
func (in *Ingester) acker() {
	defer close(in.ackDone)
	for {
		select {
		case it := <-in.inflight:
			in.ack(it)
		case <-in.procDone:
			in.writes.Wait()
			for {
				select {
				case it := <-in.inflight:
					in.ack(it)
				default:
					return
				}
			}
		}
	}
}

func (in *Ingester) ack(it *item) {
	<-it.done // every item finishes: stored, or abandoned at Stop
	in.m.inflight.Dec()
	if it.ok && !in.killed.Load() {
		it.msg.Ack()
		in.m.ackSeconds.Observe(in.now().Sub(it.recv).Seconds())
	}
}

// process takes received messages in batches and starts their writes.
func (in *Ingester) process() {
	defer close(in.procDone)
	for {
		var first *item
		select {
		case first = <-in.work:
		case <-in.stop:
			in.abandonQueued()
			return
		}
		batch := []*item{first}
	fill:
		for len(batch) < maxBatch {
			select {
			case it := <-in.work:
				batch = append(batch, it)
			default:
				break fill
			}
		}
		reqs, sizes := in.prepare(batch)
		select {
		case in.slots <- struct{}{}:
		case <-in.stop:
			for _, it := range batch {
				it.finish(false)
			}
			in.abandonQueued()
			return
		}
		in.writes.Add(1)
		go in.write(batch, reqs, sizes)
	}
}

// abandonQueued finishes, unstored, every message not yet taken: the
// broker sends them again to the next session.
func (in *Ingester) abandonQueued() {
	in.mu.Lock()
	in.stopping = true
	in.mu.Unlock()
	for {
		select {
		case it := <-in.work:
			it.finish(false)
		default:
			return
		}
	}
}

// prepare decodes a batch into one request per tenant, and returns the
// payload bytes of each request's messages.
func (in *Ingester) prepare(batch []*item) ([]*sink.Request, []int) {
	now := in.now()
	byTenant := make(map[string]int)
	var reqs []*sink.Request
	var sizes []int
	for _, it := range batch {
		tenant, rs, dl := in.p.decode(it.msg.Topic(), it.msg.Payload(), it.recv, now)
		i, ok := byTenant[tenant]
		if !ok {
			i = len(reqs)
			byTenant[tenant] = i
			reqs = append(reqs, &sink.Request{Tenant: tenant})
			sizes = append(sizes, 0)
		}
		r := reqs[i]
		sizes[i] += len(it.msg.Payload())
		if dl != nil {
			r.DeadLetters = append(r.DeadLetters, *dl)
			continue
		}
		r.Readings = append(r.Readings, rs...)
	}
	return reqs, sizes
}

// write stores the requests of a batch, each once its tenant is within
// its quotas, retrying until they are durable or the ingester is stopped,
// then finishes its messages.
func (in *Ingester) write(batch []*item, reqs []*sink.Request, sizes []int) {
	defer func() {
		<-in.slots
		in.writes.Done()
	}()
	for i, r := range reqs {
		err := in.waitQuota(in.quotaCtx, r, sizes[i])
		if err == nil {
			err = in.writeOne(r)
		}
		if err != nil {
			for _, it := range batch {
				it.finish(false)
			}
			return
		}
	}
	for _, it := range batch {
		it.finish(true)
	}
	in.m.messages.Add(float64(len(batch)))
}

func (in *Ingester) writeOne(r *sink.Request) error {
	wait := 50 * time.Millisecond
	for {
		err := in.w.Write(in.ctx, r)
		if err == nil {
			return nil
		}
		reason, busy := refusal(in.ctx, err)
		if reason == "shutdown" {
			return err
		}
		pause := wait
		if busy != nil {
			pause = min(max(busy.RetryAfter, wait), 2*time.Second)
		} else {
			wait = min(2*wait, 5*time.Second)
			if ok, dropped := in.errLog.Allow(in.now()); ok {
				in.logger.Error("store mqtt messages; will retry, nothing acknowledged", "tenant", r.Tenant, "rows", r.Rows(), "err", err, "retry_in", pause, "similar_errors_not_logged", dropped)
			}
		}
		in.m.retries.WithLabelValues(reason).Inc()
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-in.ctx.Done():
			t.Stop()
			return in.ctx.Err()
		}
	}
}

// Stop stops taking messages, waits (up to ctx) for the writes in progress
// and acknowledges what they stored, then disconnects. Messages not stored
// stay with the broker. The sink must stay open until Stop returns.
func (in *Ingester) Stop(ctx context.Context) error {
	close(in.stop)
	in.quotaCancel()
	<-in.procDone
	done := make(chan struct{})
	go func() {
		in.writes.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("wait for mqtt writes: %w", ctx.Err())
		in.cancel()
		<-done
	}
	<-in.ackDone
	in.cancel()
	in.client.Disconnect(250)
	in.m.connected.Set(0)
	return err
}

// kill simulates a crash (tests): nothing more is acknowledged, and the
// connection is dropped without a DISCONNECT.
func (in *Ingester) kill(conn net.Conn) {
	in.killed.Store(true)
	_ = conn.Close()
	in.client.Disconnect(0)
	in.cancel()
	_ = in.Stop(context.Background())
}
