package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/cursor"
	"github.com/sluicehq/sluice/internal/readapi"
	"github.com/sluicehq/sluice/internal/server"
	"github.com/sluicehq/sluice/internal/store/cqlstore"
)

// Direct mode reads Cassandra without a gateway: the read API (readings,
// audit, partitions and dead letters; not the rollups, which live in the
// gateway's rollup store) runs inside this process, over a store opened
// from the gateway's configuration, and the client talks to it through an
// in-memory transport. The commands that take --direct therefore behave
// exactly as they do against a gateway.

// directTransport serves requests with an in-process handler.
type directTransport struct{ h http.Handler }

func (t directTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// directHTTP opens the configured Cassandra store and returns an HTTP
// client whose requests it answers as tenant, and the token to send. The
// store's connections close when the process exits.
func directHTTP(ctx context.Context, cfgFile, tenant string, timeout time.Duration, stderr *os.File) (*http.Client, string, error) {
	cfg, _, err := config.Load(cfgFile, os.Environ())
	if err != nil {
		return nil, "", err
	}
	if cfg.Store.Backend != "cassandra" {
		return nil, "", fmt.Errorf("--direct reads Cassandra: set store.backend: cassandra (or SLUICE_STORE_BACKEND=cassandra), got %q", cfg.Store.Backend)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cqlstore.Open(octx, cfg.Store.Cassandra, logger, nil)
	if err != nil {
		return nil, "", err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	opts := []readapi.Option{readapi.WithConfig(cfg.Read), readapi.WithRecount(cfg.Buckets.MaxRows)}
	if cfg.Read.CursorKeyFile != "" {
		// The gateways' key: cursors from them continue here and back.
		keys, err := cursor.LoadKeys(cfg.Read.CursorKeyFile)
		if err != nil {
			return nil, "", fmt.Errorf("read.cursor_key_file: %w", err)
		}
		opts = append(opts, readapi.WithCursorKeys(keys))
	} // else a key of this process: its cursors serve --all, not a later run
	read := readapi.New(st, time.Now, logger, opts...)
	refuse := func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "direct mode is read-only", http.StatusMethodNotAllowed)
	}
	h := server.Handler([]server.Token{{Token: token, Tenant: tenant}}, server.Routes{
		PostReadings: refuse, PostAudit: refuse,
		GetReadings: read.Readings, GetAudit: read.Audit, GetPartitions: read.Partitions,
		Extra: map[string]http.HandlerFunc{
			"GET /v1/deadletters":    read.DeadLetters(st),
			"GET /v1/partitions/top": read.TopPartitions,
		},
	})
	return &http.Client{Transport: directTransport{h}, Timeout: timeout}, token, nil
}
