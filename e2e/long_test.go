package e2e

import (
	"flag"
	"os"
)

var long = flag.Bool("sluice.long", false, "run the long forms of the process tests (also SLUICE_E2E_LONG=1)")

// longForm reports whether the long forms of the tests were asked for:
// go test ./e2e -sluice.long, or SLUICE_E2E_LONG=1.
func longForm() bool { return *long || os.Getenv("SLUICE_E2E_LONG") == "1" }
