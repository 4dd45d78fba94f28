// Package rollupstore keeps minute rollups in an embedded Pebble database
// (under data_dir/rollups) when no ClickHouse is configured. It has the same
// semantics as the ClickHouse table: one entry per (tenant, metric, device,
// minute, writer, part), an insert keeps the highest version, tombstones
// (count 0) are kept so that an older version arriving later cannot come
// back, and reads fold the latest rows at query time.
package rollupstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sluicehq/sluice/internal/rollup"
)

// Store is an open embedded rollup store. Safe for concurrent use.
type Store struct {
	db *pebble.DB
	mu sync.Mutex // serialises read-compare-write of Insert
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{logger}, FormatMajorVersion: pebble.FormatNewest})
	if err != nil {
		return nil, fmt.Errorf("open rollup store %q: %w", dir, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close rollup store: %w", err)
	}
	return nil
}

// Key layout: tenant 0 metric 0 device 0 minute(8, sign flipped) writer(2) part(8).
func prefix(b []byte, tenant, metric, device string) []byte {
	b = append(append(b, tenant...), 0)
	if metric == "" {
		return b
	}
	b = append(append(b, metric...), 0)
	if device == "" {
		return b
	}
	return append(append(b, device...), 0)
}

func key(r rollup.Row) []byte {
	b := prefix(nil, r.Tenant, r.Metric, r.Device)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Minute)^(1<<63))
	b = binary.BigEndian.AppendUint16(b, r.Writer)
	return binary.BigEndian.AppendUint64(b, r.Part)
}

func decode(v []byte) (rollup.Row, error) {
	rows, err := rollup.DecodeRows(v)
	if err != nil || len(rows) != 1 {
		return rollup.Row{}, fmt.Errorf("decode rollup entry: %w", rollup.ErrCorrupt)
	}
	return rows[0], nil
}

// Insert keeps, for each row, the highest version of it, durably.
func (s *Store) Insert(ctx context.Context, rows []rollup.Row) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	for _, r := range rows {
		k := key(r)
		v, closer, err := s.db.Get(k)
		switch {
		case err == nil:
			old, derr := decode(v)
			_ = closer.Close()
			if derr == nil && old.Version >= r.Version {
				continue
			}
		case !errors.Is(err, pebble.ErrNotFound):
			return fmt.Errorf("insert rollup rows: %w", err)
		}
		if err := b.Set(k, rollup.EncodeRows(nil, []rollup.Row{r}), nil); err != nil {
			return fmt.Errorf("insert rollup rows: %w", err)
		}
	}
	if err := s.db.Apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("insert %d rollup rows: %w", len(rows), err)
	}
	return nil
}

// Rows returns the latest version of every row in the filter's range,
// tombstones excluded.
func (s *Store) Rows(ctx context.Context, f rollup.Filter) ([]rollup.Row, error) {
	p := prefix(nil, f.Tenant, f.Metric, f.Device)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return nil, fmt.Errorf("read rollup rows: %w", err)
	}
	var out []rollup.Row
	from, to := rollup.MinuteOf(f.From), f.To
	for ok := it.First(); ok; ok = it.Next() {
		if !bytes.HasPrefix(it.Key(), p) {
			break
		}
		r, err := decode(it.Value())
		if err != nil {
			_ = it.Close()
			return nil, err
		}
		if r.Count == 0 || r.Minute < from || r.Minute >= to || f.Device != "" && r.Device != f.Device {
			continue
		}
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("read rollup rows: %w", err)
	}
	return out, nil
}

// Series folds one device's metric into buckets of the step.
func (s *Store) Series(ctx context.Context, f rollup.Filter, step rollup.Step) ([]rollup.Bucket, error) {
	rows, err := s.Rows(ctx, f)
	if err != nil {
		return nil, err
	}
	return rollup.Combine(rows, step), nil
}

// Top ranks the devices of a metric.
func (s *Store) Top(ctx context.Context, f rollup.Filter, by rollup.By, limit int) ([]rollup.Rank, error) {
	rows, err := s.Rows(ctx, f)
	if err != nil {
		return nil, err
	}
	return rollup.Top(rows, by, limit), nil
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "rollupstore")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "rollupstore")
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "rollupstore")
	panic(fmt.Sprintf(format, args...))
}
