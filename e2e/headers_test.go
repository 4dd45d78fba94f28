package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestHeaderBlockBounded checks that the gateway refuses a header block past
// http.max_header_bytes with 431 before authenticating, instead of holding
// up to Go's default of 1 MiB per connection for any client.
func TestHeaderBlockBounded(t *testing.T) {
	g := startGateway(t, t.TempDir())
	for _, tc := range []struct {
		filler int
		want   int
	}{{filler: 1 << 10, want: http.StatusUnauthorized}, {filler: 128 << 10, want: http.StatusRequestHeaderFieldsTooLarge}} {
		req, err := http.NewRequest(http.MethodGet, g.url+"/v1/readings?device=d", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Filler", strings.Repeat("a", tc.filler))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("header of %d bytes: status %d, want %d", tc.filler, resp.StatusCode, tc.want)
		}
	}
	g.stop()
}
