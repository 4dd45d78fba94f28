package readapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/cursor"
	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/readparam"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// DeadLetterStore is what GET /v1/deadletters needs of a backend.
type DeadLetterStore interface {
	// ScanDeadLetters returns up to limit dead letters of one tenant-day
	// inside r, in (TS, ID) order.
	ScanDeadLetters(ctx context.Context, tenant string, day model.Day, r store.Range, limit int) ([]model.DeadLetter, error)
}

// DeadLetter is the JSON form of a dead letter.
type DeadLetter = wire.DeadLetter

// deadLettersKind names dead-letter reads in their cursors.
const deadLettersKind = "deadletters"

// DeadLetters serves GET /v1/deadletters?from=&to=&limit=&cursor=: the
// authenticated tenant's dead letters in [from, to) (default: the last 24
// hours), oldest first, under h's limits and cursor keys.
func (h *Handler) DeadLetters(st DeadLetterStore) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query()
		tenant := httpx.Tenant(r.Context())
		scope := cursor.Scope{Tenant: tenant, Kind: deadLettersKind}
		span, err := readparam.ParseSpan(v, h.now().UnixMilli()+1)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		limit, err := readparam.Limit(v, "limit", DefaultLimit, reader.MaxLimit)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		span, pos, err := h.openCursor(r, scope, span)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if err := span.CheckDays(h.cfg.MaxDays, "read.max_days"); err != nil {
			h.fail(w, r, err)
			return
		}
		from, to := span.From, span.To
		first, last := model.DayOf(from), model.DayOf(to-1) // both valid: checked above
		var after *store.Pos
		if pos != "" {
			p, err := decodeDeadPos(pos, span)
			if err != nil {
				h.fail(w, r, &readparam.Error{Param: "cursor", Reason: err.Error()})
				return
			}
			after = &p
			first = model.DayOf(p.TS)
		}
		ctx, cancel := h.deadline(r)
		defer cancel()
		var out []model.DeadLetter
		more := false
		for d := first; d <= last && !more; d++ {
			if err := ctx.Err(); err != nil {
				h.fail(w, r, err)
				return
			}
			// One more than needed tells whether another page exists.
			dls, err := st.ScanDeadLetters(ctx, tenant, d, store.Range{From: from, To: to, After: after}, limit+1-len(out))
			if err != nil {
				if ctx.Err() == nil {
					h.logger.ErrorContext(r.Context(), "read dead letters", "tenant", tenant, "day", d, "err", err)
				}
				h.fail(w, r, fmt.Errorf("read dead letters of %s: %w", d, err))
				return
			}
			out = append(out, dls...)
			if len(out) > limit {
				out, more = out[:limit], true
			}
		}
		body := wire.DeadLettersPage{DeadLetters: make([]wire.DeadLetter, len(out))}
		for i, dl := range out {
			body.DeadLetters[i] = wire.DeadLetterOf(dl)
		}
		if more {
			lastDL := out[len(out)-1]
			body.NextCursor = h.seal(scope, span, encodeDeadPos(store.Pos{TS: lastDL.TS, Key: lastDL.ID}))
		}
		httpx.JSON(w, http.StatusOK, body)
	}
}

// encodeDeadPos is the position a dead-letter cursor carries.
func encodeDeadPos(p store.Pos) string {
	return strconv.FormatInt(p.TS, 10) + "." + p.Key
}

// decodeDeadPos reads a position from a verified cursor: its time must lie
// in the cursor's span.
func decodeDeadPos(s string, span readparam.Span) (store.Pos, error) {
	ts, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return store.Pos{}, fmt.Errorf("%w: unknown position", cursor.ErrInvalid)
	}
	if n < span.From || n >= span.To {
		return store.Pos{}, fmt.Errorf("%w: its position lies outside its range", cursor.ErrInvalid)
	}
	return store.Pos{TS: n, Key: id}, nil
}
