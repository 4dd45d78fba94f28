package sink

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	checkInFlight = true // every test checks load's invariant
	os.Exit(m.Run())
}
