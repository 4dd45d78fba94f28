package readapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/httpx"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/reader"
	"github.com/sluicehq/sluice/internal/store"
	"github.com/sluicehq/sluice/internal/wire"
)

// DeadLetterStore is what GET /v1/deadletters needs of a backend.
type DeadLetterStore interface {
	// ScanDeadLetters returns up to limit dead letters of one tenant-day
	// inside r, in (TS, ID) order.
	ScanDeadLetters(ctx context.Context, tenant string, day model.Day, r store.Range, limit int) ([]model.DeadLetter, error)
}

// MaxDeadLetterDays bounds the days one dead-letter query may span.
const MaxDeadLetterDays = 400

// DeadLetter is the JSON form of a dead letter.
type DeadLetter = wire.DeadLetter

// DeadLetters serves GET /v1/deadletters?from=&to=&limit=&cursor=: the
// authenticated tenant's dead letters in [from, to) (default: the last 24
// hours), oldest first.
func DeadLetters(st DeadLetterStore, now func() time.Time, logger *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := r.URL.Query()
		to := now().UnixMilli() + 1
		if s := v.Get("to"); s != "" {
			t, err := ParseTime(s)
			if err != nil {
				httpx.Error(w, http.StatusBadRequest, "parameter to: "+err.Error())
				return
			}
			to = t
		}
		from := to - model.MillisPerDay
		if s := v.Get("from"); s != "" {
			t, err := ParseTime(s)
			if err != nil {
				httpx.Error(w, http.StatusBadRequest, "parameter from: "+err.Error())
				return
			}
			from = t
		}
		if to <= from {
			httpx.Error(w, http.StatusBadRequest, "parameter to must be after from")
			return
		}
		first, last := model.DayOf(from), model.DayOf(to-1)
		if int(last-first) >= MaxDeadLetterDays {
			httpx.Error(w, http.StatusBadRequest, fmt.Sprintf("parameters from, to: the range spans %d days, at most %d are allowed", int(last-first)+1, MaxDeadLetterDays))
			return
		}
		limit := DefaultLimit
		if s := v.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > reader.MaxLimit {
				httpx.Error(w, http.StatusBadRequest, fmt.Sprintf("parameter limit: must be 1..%d, got %q", reader.MaxLimit, s))
				return
			}
			limit = n
		}
		var after *store.Pos
		if s := v.Get("cursor"); s != "" {
			p, err := decodeDeadCursor(s)
			if err != nil {
				httpx.Error(w, http.StatusBadRequest, "parameter cursor: "+err.Error())
				return
			}
			after = &p
			if p.TS >= from {
				first = model.DayOf(p.TS)
			}
		}
		tenant := httpx.Tenant(r.Context())
		var out []model.DeadLetter
		more := false
		for d := first; d <= last && !more; d++ {
			// One more than needed tells whether another page exists.
			dls, err := st.ScanDeadLetters(r.Context(), tenant, d, store.Range{From: from, To: to, After: after}, limit+1-len(out))
			if err != nil {
				logger.Error("read dead letters", "tenant", tenant, "day", d, "err", err)
				httpx.Error(w, http.StatusInternalServerError, "read failed: "+err.Error())
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
			body.NextCursor = encodeDeadCursor(store.Pos{TS: lastDL.TS, Key: lastDL.ID})
		}
		httpx.JSON(w, http.StatusOK, body)
	}
}

func encodeDeadCursor(p store.Pos) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.TS, 10) + "." + p.Key))
}

func decodeDeadCursor(s string) (store.Pos, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.Pos{}, errors.New("not a cursor from this endpoint")
	}
	ts, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ts, 10, 64)
	if !ok || err != nil {
		return store.Pos{}, errors.New("not a cursor from this endpoint")
	}
	return store.Pos{TS: n, Key: id}, nil
}
