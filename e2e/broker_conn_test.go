package e2e

import (
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

// TestMQTTSilentConnectionDoesNotHoldShutdown opens a TCP connection to the
// embedded broker that never sends CONNECT, then stops the gateway: the
// broker closes such a connection after its connect timeout (10s), so
// SIGTERM ends the process instead of waiting on it for ever.
func TestMQTTSilentConnectionDoesNotHoldShutdown(t *testing.T) {
	addr := testenv.FreeAddr(t)
	g := startMQTTGateway(t, t.TempDir(), addr)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	time.Sleep(100 * time.Millisecond) // let the broker accept it
	g.stop()                           // fails after 30s
}
