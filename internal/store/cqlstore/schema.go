package cqlstore

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"strings"
	"text/template"
)

//go:embed schema.cql
var schemaCQL string

// Schema returns the schema's statements for cfg, in order: the keyspace,
// then the tables.
func Schema(cfg Config) ([]string, error) {
	tpl, err := template.New("schema.cql").Option("missingkey=error").Parse(schemaCQL)
	if err != nil {
		return nil, fmt.Errorf("parse schema.cql: %w", err)
	}
	var buf bytes.Buffer
	if err := tpl.Execute(&buf, struct{ Keyspace, Replication string }{cfg.Keyspace, cfg.replication()}); err != nil {
		return nil, fmt.Errorf("render schema.cql: %w", err)
	}
	// Drop comments first: they may hold semicolons.
	var sb strings.Builder
	for line := range strings.SplitSeq(buf.String(), "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		sb.WriteString(line)
		sb.WriteByte('\n')
	}
	var stmts []string
	for stmt := range strings.SplitSeq(sb.String(), ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			stmts = append(stmts, stmt)
		}
	}
	return stmts, nil
}

// Migrate creates the keyspace and every table if they do not exist. It is
// idempotent: running it again, or from several gateways at once, changes
// nothing. It waits for schema agreement after each statement so that the
// next one, and the gateway after it, see the change on every node.
func Migrate(ctx context.Context, cfg Config, logger *slog.Logger) error {
	stmts, err := Schema(cfg)
	if err != nil {
		return err
	}
	sess, err := connect(ctx, cfg, "", logger)
	if err != nil {
		return err
	}
	defer sess.Close()
	for _, stmt := range stmts {
		// Schema changes go to all replicas at once; use the strictest
		// reasonable level so a migration is not half applied.
		if err := sess.Query(stmt).Idempotent(true).ExecContext(ctx); err != nil && !columnExists(stmt, err) {
			return fmt.Errorf("migrate: %s: %w", firstLine(stmt), err)
		}
		if err := sess.AwaitSchemaAgreement(ctx); err != nil {
			return fmt.Errorf("migrate: wait for schema agreement after %s: %w", firstLine(stmt), err)
		}
		logger.Debug("schema statement applied", "stmt", firstLine(stmt))
	}
	logger.Info("cassandra schema is up to date", "keyspace", cfg.Keyspace, "statements", len(stmts))
	return nil
}

// columnExists reports whether err says that the column an ALTER TABLE
// ADD statement adds is already there (CQL has no ADD IF NOT EXISTS on
// every server Sluice supports).
func columnExists(stmt string, err error) bool {
	if !strings.HasPrefix(strings.ToUpper(stmt), "ALTER TABLE") {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "already exist") || strings.Contains(msg, "conflicts with an existing column")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(strings.TrimSuffix(s, "("))
}

// DropKeyspace drops the keyspace and everything in it. Tests use it to
// clean up; operators should not need it.
func DropKeyspace(ctx context.Context, cfg Config, logger *slog.Logger) error {
	sess, err := connect(ctx, cfg, "", logger)
	if err != nil {
		return err
	}
	defer sess.Close()
	if err := sess.Query(`DROP KEYSPACE IF EXISTS ` + cfg.Keyspace).ExecContext(ctx); err != nil {
		return fmt.Errorf("drop keyspace %s: %w", cfg.Keyspace, err)
	}
	return nil
}
