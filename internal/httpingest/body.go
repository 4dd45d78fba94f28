package httpingest

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/bytebudget"
	"github.com/sluicehq/sluice/internal/httpx"
)

const (
	// firstChunk is the buffer a body of unknown size starts with.
	firstChunk = 32 << 10
	// gzipState is charged for each gzip stream being inflated: the
	// decompressor's window and tables, and its input buffer.
	gzipState = 64 << 10
	// bodyRetryAfter is what a request refused for want of body budget is
	// told to wait.
	bodyRetryAfter = time.Second
	// maxPooledBuf is the largest body buffer kept for reuse: larger ones
	// are let go rather than pinned.
	maxPooledBuf = 4 << 20
)

// MinInflightBodyBytes is the smallest body budget that lets a request of
// the largest allowed size through: its buffer at the limit plus the half
// as large one it grows from while the bytes are copied, and the gzip state.
func MinInflightBodyBytes(maxBody, maxDecompressed int64) int64 {
	most := max(maxBody, maxDecompressed) + 1
	return most + most/2 + gzipState
}

// bodyError is why a body was not taken.
type bodyError struct {
	status int
	msg    string
	// busy is set when the body budget stayed full: 503 with Retry-After.
	busy bool
}

func (e *bodyError) Error() string { return e.msg }

func refuse(status int, format string, args ...any) *bodyError {
	return &bodyError{status: status, msg: "nothing stored: " + fmt.Sprintf(format, args...)}
}

// readBody reads the body, inflating it if it is gzip-encoded, and returns
// it whole. Every buffer it allocates is first charged to ch, which the
// caller releases once done with the body: a body of known length is read
// into a buffer of exactly that size; one of unknown length (chunked, or
// the output of gzip) starts small and doubles, up to half the limit, then
// jumps to the limit plus one byte, so that reading one byte past the limit
// refuses the body without any buffer larger than that. It returns a status
// and message when the body cannot be taken.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, ch *bytebudget.Charge) ([]byte, *bodyError) {
	if r.ContentLength > h.cfg.MaxBodyBytes {
		return nil, refuse(http.StatusRequestEntityTooLarge, "body of %d bytes is over the limit of %d bytes", r.ContentLength, h.cfg.MaxBodyBytes)
	}
	body := http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	var (
		src   io.Reader = body
		limit           = h.cfg.MaxBodyBytes
		size            = int64(firstChunk)
		exact bool
		what  = "body"
	)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		if r.ContentLength >= 0 {
			// One more byte than announced, to see the end without growing.
			size, exact = r.ContentLength+1, true
		}
	case "gzip":
		if err := ch.Grow(r.Context(), gzipState); err != nil {
			return nil, budgetError(err)
		}
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, readError(err, h.cfg.MaxBodyBytes)
		}
		defer zr.Close()
		src, limit, what = zr, h.cfg.MaxDecompressedBytes, "decompressed body"
		if r.ContentLength > 0 {
			// Most bodies inflate 4-10 times; a guess saves a few copies.
			size = max(size, r.ContentLength*4)
		}
	default:
		return nil, refuse(http.StatusUnsupportedMediaType, "Content-Encoding %q is not supported (allowed: gzip, identity)", enc)
	}
	if !exact {
		size = min(size, (limit+1)/2)
	}
	if err := ch.Grow(r.Context(), size); err != nil {
		return nil, budgetError(err)
	}
	buf := h.getBuf(ch, size)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) > limit {
				break
			}
			next := int64(cap(buf)) * 2
			if next > (limit+1)/2 {
				next = limit + 1
			}
			if err := ch.Grow(r.Context(), next); err != nil {
				return nil, budgetError(err)
			}
			nb := make([]byte, len(buf), next)
			copy(nb, buf)
			ch.Shrink(int64(cap(buf)))
			buf = nb
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, readError(err, h.cfg.MaxBodyBytes)
		}
	}
	if int64(len(buf)) > limit {
		return nil, refuse(http.StatusRequestEntityTooLarge, "%s is over the limit of %d bytes", what, limit)
	}
	return buf, nil
}

// getBuf returns an empty buffer of at least size bytes, size being
// already charged to ch: a pooled one if one is large enough and the budget
// has room now for the bytes of its capacity past size (at most a quarter
// more), else a new one of exactly size. Either way ch covers its capacity.
func (h *Handler) getBuf(ch *bytebudget.Charge, size int64) []byte {
	if pb, ok := h.bufs.Get().(*[]byte); ok {
		if c := int64(cap(*pb)); c >= size && c <= size+size/4 && ch.TryGrow(c-size) {
			return (*pb)[:0]
		}
		h.bufs.Put(pb)
	}
	return make([]byte, 0, size)
}

// putBuf gives a body buffer back for reuse, once nothing refers to its
// bytes; large ones are let go.
func (h *Handler) putBuf(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBuf {
		return
	}
	b = b[:0]
	h.bufs.Put(&b)
}

// budgetError answers a request that found no room in the body budget (or
// whose client left while it waited).
func budgetError(err error) *bodyError {
	return &bodyError{status: http.StatusServiceUnavailable, busy: true,
		msg: "nothing stored: too many request bodies in flight, retry later: " + err.Error()}
}

func readError(err error, limit int64) *bodyError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return refuse(http.StatusRequestEntityTooLarge, "body is over the limit of %d bytes", limit)
	}
	if errors.Is(err, gzip.ErrHeader) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, io.ErrUnexpectedEOF) {
		return refuse(http.StatusBadRequest, "body is not valid gzip")
	}
	return refuse(http.StatusBadRequest, "read body: %v", err)
}

// answerer writes a refused request's answer the way the protocol's
// clients read it.
type answerer interface {
	busy(w http.ResponseWriter, retryAfter time.Duration, msg string)
	fail(w http.ResponseWriter, status int, msg string)
}

// jsonAnswers answers as /v1/readings and /v1/audit do.
type jsonAnswers struct{}

func (jsonAnswers) busy(w http.ResponseWriter, retryAfter time.Duration, msg string) {
	httpx.Busy(w, retryAfter, msg)
}
func (jsonAnswers) fail(w http.ResponseWriter, status int, msg string) { httpx.Error(w, status, msg) }

// influxAnswers answers as InfluxDB's write API of that version does.
type influxAnswers struct{ v2 bool }

func (a influxAnswers) busy(w http.ResponseWriter, retryAfter time.Duration, msg string) {
	httpx.InfluxError(w, a.v2, http.StatusServiceUnavailable, retryAfter.Seconds(), msg)
}
func (a influxAnswers) fail(w http.ResponseWriter, status int, msg string) {
	httpx.InfluxError(w, a.v2, status, 0, msg)
}

// takeBody reads r's body under charge (readBody). When it cannot, it
// counts why under kind, answers through a (nothing when the client is
// gone) and returns false.
func (h *Handler) takeBody(w http.ResponseWriter, r *http.Request, kind string, charge *bytebudget.Charge, a answerer) ([]byte, bool) {
	body, berr := h.readBody(w, r, charge)
	switch {
	case berr == nil:
		return body, true
	case berr.busy && r.Context().Err() != nil:
		h.m.rejected.WithLabelValues(kind, "cancelled").Inc() // the client is gone
	case berr.busy:
		h.m.rejected.WithLabelValues(kind, "body_busy").Inc()
		a.busy(w, bodyRetryAfter, berr.msg)
	default:
		h.m.rejected.WithLabelValues(kind, "body").Inc()
		a.fail(w, berr.status, berr.msg)
	}
	return nil, false
}
