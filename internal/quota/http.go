package quota

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/sink"
)

// Rows counts a request's rows as its quota does: readings, audit events
// and dead letters (a reading's metrics are not counted one by one: the
// byte quota bounds its size).
func Rows(r *sink.Request) int64 {
	return int64(len(r.Readings) + len(r.Audit) + len(r.DeadLetters))
}

// Middleware limits the HTTP ingest handler next by the tenant's quotas
// (the tenant is httpx.Tenant, so it runs after authentication): it
// refuses a request with 429 when the tenant has its maximum of requests
// in progress, or when the body's Content-Length is more than its byte
// bucket holds, in both cases before the body is read. A body without a
// Content-Length is counted as it is read and charged by Writer. A
// Content-Length over maxBody goes to next uncharged: next refuses it
// (413) without reading it.
func (q *Quotas) Middleware(maxBody int64, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant := httpx.Tenant(r.Context())
		lim := q.For(tenant)
		if lim.Unlimited() {
			next(w, r)
			return
		}
		release, err := q.Enter(tenant)
		if err != nil {
			tooMany(w, err)
			return
		}
		defer release()
		if lim.BytesPerSecond > 0 {
			switch {
			case r.ContentLength < 0:
				c := &countingBody{ReadCloser: r.Body}
				r.Body = c
				r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, c))
			case r.ContentLength <= maxBody:
				if err := q.TakeBytes(tenant, r.ContentLength); err != nil {
					tooMany(w, err)
					return
				}
			}
		}
		next(w, r)
	}
}

func tooMany(w http.ResponseWriter, err error) {
	var e *ExceededError
	if !errors.As(err, &e) {
		httpx.Error(w, http.StatusInternalServerError, err.Error()) // not reached: every refusal is an *ExceededError
		return
	}
	httpx.TooMany(w, e.RetryAfter, ExceededMessage(e))
}

// ExceededMessage is the error message of a 429 for e: it names the quota
// and says when to try again.
func ExceededMessage(e *ExceededError) string {
	return fmt.Sprintf("nothing stored: %s; retry after %s", e.Error(), e.RetryAfter.Round(time.Millisecond))
}

type bodyKey struct{}

// countingBody counts the bytes read of a body sent without a
// Content-Length. The handler reads it on the request's goroutine, which
// is also the one that calls Writer.Write.
type countingBody struct {
	io.ReadCloser
	n int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// Writer is the write pipeline: room for a request's rows is reserved
// before they are decoded, then the rows are written under it.
type Writer interface {
	Reserve(ctx context.Context, rows int) (*sink.Reservation, error)
	WriteReserved(ctx context.Context, res *sink.Reservation, req *sink.Request) error
}

// Writer returns next limited by the tenant's row quota (and its byte
// quota for a body Middleware counted): a request over it is refused with
// an *ExceededError before it reaches next, and the pipeline room reserved
// for it while it was decoded is given back at once.
func (q *Quotas) Writer(next Writer) Writer { return &limited{q: q, next: next} }

type limited struct {
	q    *Quotas
	next Writer
}

func (l *limited) Reserve(ctx context.Context, rows int) (*sink.Reservation, error) {
	return l.next.Reserve(ctx, rows)
}

func (l *limited) WriteReserved(ctx context.Context, res *sink.Reservation, req *sink.Request) error {
	if c, ok := ctx.Value(bodyKey{}).(*countingBody); ok {
		if err := l.q.TakeBytes(req.Tenant, c.n); err != nil {
			res.Release()
			l.q.m.refusedRows.WithLabelValues(l.q.label(req.Tenant)).Add(float64(Rows(req)))
			return err
		}
	}
	if err := l.q.TakeRows(req.Tenant, Rows(req)); err != nil {
		res.Release()
		l.q.m.refusedRows.WithLabelValues(l.q.label(req.Tenant)).Add(float64(Rows(req)))
		return err
	}
	return l.next.WriteReserved(ctx, res, req)
}
