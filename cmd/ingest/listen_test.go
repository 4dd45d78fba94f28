package main

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
)

// TestListenBoundsConnections checks that http.max_connections holds a
// connection past the bound unserved until an earlier one closes, and that
// 0 means no bound.
func TestListenBoundsConnections(t *testing.T) {
	for _, tc := range []struct {
		max       int
		thirdWait bool
	}{{max: 2, thirdWait: true}, {max: 0, thirdWait: false}} {
		ln, err := listen(config.HTTP{Addr: "127.0.0.1:0", MaxConnections: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("ok"))
		})}
		go func() { _ = srv.Serve(ln) }()
		var conns []net.Conn
		for range 3 {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		ask := func(c net.Conn, wait time.Duration) bool {
			_ = c.SetDeadline(time.Now().Add(wait))
			if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				return false
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
		for i := range 2 {
			if !ask(conns[i], 5*time.Second) {
				t.Fatalf("max %d: connection %d not served", tc.max, i)
			}
		}
		// Past the bound the third connection must wait (a short wait shows
		// it); without one it must be served (a generous wait, as above).
		wait := 5 * time.Second
		if tc.thirdWait {
			wait = 300 * time.Millisecond
		}
		served := ask(conns[2], wait)
		if served == tc.thirdWait {
			t.Fatalf("max %d: third connection served=%v while two are open", tc.max, served)
		}
		if tc.thirdWait {
			conns[0].Close()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			// conns[2] was accepted in place of conns[0]; its request timed
			// out above, so ask on a fresh connection after closing it too.
			conns[2].Close()
			if !ask(c, 5*time.Second) {
				t.Fatalf("max %d: no connection served after two closed", tc.max)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		srv.Close()
	}
}
