package auditlog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/sluicehq/sluice/internal/model"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"enabled without key", func(c *Config) { c.Enabled = true }, "audit.key_file"},
		{"seal too soon", func(c *Config) { c.SealDelay = c.AcceptLate + time.Minute }, "audit.seal_delay"},
		{"negative accept_late", func(c *Config) { c.AcceptLate = -time.Second }, "audit.accept_late"},
		{"interval zero", func(c *Config) { c.CheckpointInterval = 0 }, "audit.checkpoint_interval"},
		{"lookback short", func(c *Config) { c.SealLookback = time.Hour }, "audit.seal_lookback"},
		{"bad verifier key", func(c *Config) { c.VerifierKeys = []string{"nope"} }, "audit.verifier_keys[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func TestGate(t *testing.T) {
	d := model.Day(20400)
	now := time.UnixMilli(d.End()).Add(59 * time.Minute)
	l := &Log{cfg: DefaultConfig(), now: func() time.Time { return now }}
	if err := l.Gate(&model.AuditEvent{EventID: "a", TS: d.End() - 1}); err != nil {
		t.Errorf("event of a day within accept_late refused: %v", err)
	}
	now = now.Add(time.Minute)
	var late *LateError
	if err := l.Gate(&model.AuditEvent{EventID: "a", Stream: "s", TS: d.End() - 1}); !errors.As(err, &late) || late.EventID != "a" || late.Day != d {
		t.Errorf("event past accept_late: %v, want a *LateError for a on %s", err, d)
	}
}

func TestKeysAndOrigin(t *testing.T) {
	skey, vkey, err := GenerateKey("audit.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if pub, err := PublicKey(skey); err != nil || pub != vkey {
		t.Fatalf("PublicKey = %q, %v; want %q", pub, err, vkey)
	}
	_, old, _ := GenerateKey("audit.example.com")
	k, err := ParseKeys(skey, []string{old})
	if err != nil || len(k.Public) != 2 || k.Public[0] != vkey {
		t.Fatalf("ParseKeys: %+v %v", k, err)
	}
	// Listing the current key or an older one again changes nothing: each
	// is kept once, and a checkpoint signed with the key still verifies
	// (two equal verifiers made note.Open call every note ambiguous).
	k2, err := ParseKeys(skey, []string{old, vkey, old})
	if err != nil || len(k2.Public) != 2 || k2.Public[0] != vkey || k2.Public[1] != old {
		t.Fatalf("ParseKeys with repeated keys: %+v %v", k2, err)
	}
	signed, err := note.Sign(&note.Note{Text: "audit.example.com/acme/s\n1\nAAAA\n"}, k2.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(signed, k2.Verifiers); err != nil {
		t.Errorf("a note signed with the current key, opened with repeated verifier keys: %v", err)
	}
	if got := Origin("audit.example.com", "acme", "pay ments+x/é"); got != "audit.example.com/acme/pay%20ments%2Bx%2F%C3%A9" {
		t.Errorf("Origin = %q", got)
	}
}
