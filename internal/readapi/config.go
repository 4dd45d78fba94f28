package readapi

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/model"
)

// Config is the read.* section: the bounds of every read request.
type Config struct {
	// Timeout is the server-side deadline of one read request.
	Timeout time.Duration `mapstructure:"timeout"`
	// MaxDays is the most UTC days one read may span (readings, audit,
	// dead letters, rollups, top lists and rollup rebuilds): each day costs
	// at least one catalogue read.
	MaxDays int `mapstructure:"max_days"`
	// CursorKeyFile holds the key that authenticates cursors. Empty: a key
	// generated once and kept in data_dir/cursor.key. Gateways that share a
	// Cassandra store must share one key file, or a cursor from one is
	// refused by another.
	CursorKeyFile string `mapstructure:"cursor_key_file"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Timeout: 30 * time.Second, MaxDays: 400}
}

// maxSpanDays is the number of days in the valid time range.
const maxSpanDays = int(model.MaxDay-model.MinDay) + 1

// Validate reports every bad setting.
func (c Config) Validate() error {
	var errs []error
	if c.Timeout < 100*time.Millisecond || c.Timeout > time.Hour {
		errs = append(errs, fmt.Errorf("read.timeout: must be 100ms..1h, got %s", c.Timeout))
	}
	if c.MaxDays < 1 || c.MaxDays > maxSpanDays {
		errs = append(errs, fmt.Errorf("read.max_days: must be 1..%d, got %d", maxSpanDays, c.MaxDays))
	}
	return errors.Join(errs...)
}
