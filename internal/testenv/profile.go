package testenv

import (
	"os"
	"runtime/pprof"
	"testing"
)

// CPUProfile starts a CPU profile of this process into file, or nothing if
// file is empty, and returns the function that stops it. Benchmarks use it
// to profile one phase (a seal, a drain) where -cpuprofile would profile
// the whole run.
func CPUProfile(tb testing.TB, file string) func() {
	tb.Helper()
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			tb.Error(err)
		}
	}
}
