package broker

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// listener is a mochi listener over a bound net.Listener, plain or TLS. It
// gives every connection it accepts a time to finish its TLS handshake and
// send CONNECT (mochi sets the deadlines of the client's keep-alive once it
// read CONNECT), so that a client that opens connections and says nothing
// holds nothing for long. (mochi's own listeners.Net races on an error
// variable shared by its connection goroutines.)
type listener struct {
	id      string
	ln      net.Listener
	tls     *tls.Config // nil: plain
	timeout time.Duration
	log     *slog.Logger
	// disconnect disconnects the listener's clients when it closes, in
	// place of mochi's own (see Close); nil: mochi's.
	disconnect func(id string)
	once       sync.Once
	mu         sync.Mutex            // orders conns.Add before conns.Wait
	closed     bool                  // under mu
	open       map[net.Conn]struct{} // connections being served, under mu
	conns      sync.WaitGroup        // connection goroutines
}

var _ listeners.Listener = (*listener)(nil)

func (l *listener) ID() string       { return l.id }
func (l *listener) Address() string  { return l.ln.Addr().String() }
func (l *listener) Protocol() string { return "tcp" }

func (l *listener) Init(log *slog.Logger) error {
	l.log = log
	return nil
}

// Serve accepts connections until the listener is closed.
func (l *listener) Serve(establish listeners.EstablishFn) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return // closed
		}
		if err := c.SetDeadline(time.Now().Add(l.timeout)); err != nil {
			_ = c.Close()
			continue
		}
		if l.tls != nil {
			c = tls.Server(c, l.tls)
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = c.Close()
			return
		}
		l.conns.Add(1)
		if l.open == nil {
			l.open = make(map[net.Conn]struct{})
		}
		l.open[c] = struct{}{}
		l.mu.Unlock()
		go func() {
			defer l.conns.Done()
			defer func() {
				l.mu.Lock()
				delete(l.open, c)
				l.mu.Unlock()
			}()
			if err := establish(l.id, c); err != nil {
				l.log.Debug("mqtt connection ended", "listener", l.id, "remote", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// Close stops accepting, has mochi disconnect the listener's clients, ends
// the reads and writes of connections that have not sent CONNECT yet (mochi
// does not know them) by moving their deadline to now, and waits for every
// connection to end. (mochi waits for them too, but its wait is not ordered
// after the goroutines that registered with it; this one is.)
func (l *listener) Close(closeClients listeners.CloseFn) {
	l.once.Do(func() {
		_ = l.ln.Close()
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		if l.disconnect != nil {
			l.disconnect(l.id)
		} else {
			closeClients(l.id)
		}
		l.mu.Lock()
		for c := range l.open {
			_ = c.SetDeadline(time.Now())
		}
		l.mu.Unlock()
		l.conns.Wait()
	})
}
