package httpingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/decode"
)

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// onlyReader hides bytes.Reader's other methods, so that the request has no
// known length (chunked).
type onlyReader struct{ io.Reader }

// TestReadBody checks each way a body is taken or refused, what the charge
// holds once it is read, and that no buffer grows past the limit plus one
// byte.
func TestReadBody(t *testing.T) {
	const maxBody, maxInflated = 64 << 10, 256 << 10
	legal := bytes.Repeat([]byte("x"), 40<<10)
	cases := []struct {
		name    string
		body    []byte
		chunked bool
		gzip    bool
		cl      int64 // announced length when not -1 and not chunked; 0 means len(body)
		status  int
		msg     string
		// most is the most the charge may hold once the body is read.
		most int64
	}{
		{name: "known length", body: legal, status: 0, most: int64(len(legal)) + 1},
		{name: "known length at the limit", body: bytes.Repeat([]byte("x"), maxBody), most: maxBody + 1},
		{name: "known length over the limit", body: bytes.Repeat([]byte("x"), maxBody+1), status: 413, msg: "body of 65537 bytes is over the limit of 65536 bytes", most: 0},
		{name: "chunked", body: legal, chunked: true, most: maxBody + 1},
		{name: "chunked small", body: legal[:100], chunked: true, most: firstChunk},
		{name: "chunked at the limit", body: bytes.Repeat([]byte("x"), maxBody), chunked: true, most: maxBody + 1},
		{name: "chunked over the limit", body: bytes.Repeat([]byte("x"), maxBody+1), chunked: true, status: 413, msg: "body is over the limit of 65536 bytes", most: maxBody + 1},
		{name: "gzip", body: gzipOf(t, legal), gzip: true, most: maxInflated/2 + gzipState},
		{name: "gzip at the limit", body: gzipOf(t, bytes.Repeat([]byte(" "), maxInflated)), gzip: true, most: maxInflated + 1 + gzipState},
		{name: "gzip bomb", body: gzipOf(t, bytes.Repeat([]byte(" "), 8<<20)), gzip: true, status: 413, msg: "decompressed body is over the limit of 262144 bytes", most: maxInflated + 1 + gzipState},
		{name: "chunked gzip bomb", body: gzipOf(t, bytes.Repeat([]byte(" "), 8<<20)), gzip: true, chunked: true, status: 413, msg: "decompressed body is over the limit", most: maxInflated + 1 + gzipState},
		{name: "not gzip", body: legal, gzip: true, status: 400, msg: "not valid gzip", most: gzipState},
		{name: "truncated gzip", body: gzipOf(t, legal)[:100], gzip: true, status: 400, msg: "not valid gzip", most: maxInflated/2 + gzipState},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Config{MaxBodyBytes: maxBody, MaxDecompressedBytes: maxInflated, Limits: decode.DefaultLimits()},
				nil, time.Now, slog.New(slog.DiscardHandler), nil)
			var src io.Reader = bytes.NewReader(tc.body)
			if tc.chunked {
				src = onlyReader{src}
			}
			r := httptest.NewRequest(http.MethodPost, "/v1/readings", src)
			if tc.chunked {
				r.ContentLength = -1
			}
			if tc.gzip {
				r.Header.Set("Content-Encoding", "gzip")
			}
			ch := h.bodies.Charge()
			got, err := h.readBody(httptest.NewRecorder(), r, ch)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("refused: %d %s", err.status, err.msg)
				}
				want := tc.body
				if tc.gzip {
					zr, _ := gzip.NewReader(bytes.NewReader(tc.body))
					want, _ = io.ReadAll(zr)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("read %d bytes, want %d", len(got), len(want))
				}
				if int64(cap(got))+gzipStateOf(tc.gzip) > ch.Held() {
					t.Errorf("buffer of %d bytes, but only %d charged", cap(got), ch.Held())
				}
			} else {
				if err == nil {
					t.Fatalf("took a body it should refuse with %d", tc.status)
				}
				if err.status != tc.status || !strings.Contains(err.msg, tc.msg) || err.busy {
					t.Fatalf("got %d %q (busy %v), want %d with %q", err.status, err.msg, err.busy, tc.status, tc.msg)
				}
			}
			if ch.Held() > tc.most {
				t.Errorf("charge holds %d bytes, want at most %d", ch.Held(), tc.most)
			}
			ch.Release()
			if ch.Held() != 0 {
				t.Errorf("charge holds %d bytes after Release", ch.Held())
			}
		})
	}
}

func gzipStateOf(gz bool) int64 {
	if gz {
		return gzipState
	}
	return 0
}

// TestReadBodyFitsTheSmallestBudget: with the budget at its least allowed
// size, the largest body (gzip growing to the limit) is still read.
func TestReadBodyFitsTheSmallestBudget(t *testing.T) {
	const maxBody, maxInflated = 64 << 10, 1<<20 + 12345
	h := New(Config{MaxBodyBytes: maxBody, MaxDecompressedBytes: maxInflated, Limits: decode.DefaultLimits()},
		nil, time.Now, slog.New(slog.DiscardHandler), nil)
	// The budget is the least allowed: a charge of exactly that fits, one
	// byte more is past the whole budget.
	least := MinInflightBodyBytes(maxBody, maxInflated)
	probe := h.bodies.Charge()
	if probe.Grow(context.Background(), least+1) == nil || probe.Grow(context.Background(), least) != nil {
		t.Fatalf("budget is not the least allowed %d", least)
	}
	probe.Release()
	for _, size := range []int{maxInflated, maxInflated + 1, maxInflated/2 + 1} {
		body := gzipOf(t, bytes.Repeat([]byte(" "), size))
		r := httptest.NewRequest(http.MethodPost, "/v1/readings", onlyReader{bytes.NewReader(body)})
		r.ContentLength = -1
		r.Header.Set("Content-Encoding", "gzip")
		ch := h.bodies.Charge()
		_, err := h.readBody(httptest.NewRecorder(), r, ch)
		ch.Release()
		if err != nil && (err.busy || size <= maxInflated) {
			t.Errorf("%d bytes: %d %s", size, err.status, err.msg)
		}
	}
}

// TestReadBodyBusy: a body that finds the budget full waits at most the
// admission timeout and is refused as busy; once the budget is given back,
// bodies are read again.
func TestReadBodyBusy(t *testing.T) {
	const maxBody = 64 << 10
	h := New(Config{MaxBodyBytes: maxBody, MaxDecompressedBytes: maxBody, BodyAdmissionTimeout: 50 * time.Millisecond, Limits: decode.DefaultLimits()},
		nil, time.Now, slog.New(slog.DiscardHandler), nil)
	hog := h.bodies.Charge()
	if err := hog.Grow(context.Background(), h.cfg.MaxInflightBodyBytes-100); err != nil {
		t.Fatal(err)
	}
	read := func(ctx context.Context) *bodyError {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/readings", bytes.NewReader(make([]byte, 1000)))
		ch := h.bodies.Charge()
		defer ch.Release()
		_, err := h.readBody(httptest.NewRecorder(), r, ch)
		return err
	}
	start := time.Now()
	err := read(context.Background())
	if err == nil || !err.busy || err.status != http.StatusServiceUnavailable {
		t.Fatalf("with the budget full: %+v, want busy 503", err)
	}
	if waited := time.Since(start); waited < 40*time.Millisecond || waited > 5*time.Second {
		t.Errorf("waited %s for room, want about the 50ms admission timeout", waited)
	}
	// A request whose client leaves stops waiting.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := read(ctx); err == nil || !err.busy {
		t.Fatalf("cancelled while the budget is full: %+v, want busy", err)
	}
	hog.Release()
	if err := read(context.Background()); err != nil {
		t.Fatalf("after the budget was given back: %d %s", err.status, err.msg)
	}
}

// TestBufPoolCharged: a pooled buffer is reused only when it fits, and the
// charge then covers its whole capacity.
func TestBufPoolCharged(t *testing.T) {
	h := New(Config{MaxBodyBytes: 64 << 10, MaxDecompressedBytes: 64 << 10, Limits: decode.DefaultLimits()},
		nil, time.Now, slog.New(slog.DiscardHandler), nil)
	h.putBuf(make([]byte, 10, 1100))
	ch := h.bodies.Charge()
	defer ch.Release()
	if err := ch.Grow(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
	b := h.getBuf(ch, 1000)
	if len(b) != 0 || cap(b) < 1000 || int64(cap(b)) > ch.Held() {
		t.Fatalf("buffer len %d cap %d with %d charged", len(b), cap(b), ch.Held())
	}
	h.putBuf(make([]byte, 0, 5000)) // far larger than asked: not reused
	ch2 := h.bodies.Charge()
	defer ch2.Release()
	if err := ch2.Grow(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	if b := h.getBuf(ch2, 100); cap(b) != 100 || ch2.Held() != 100 {
		t.Fatalf("buffer cap %d with %d charged, want a new one of 100", cap(b), ch2.Held())
	}
}
