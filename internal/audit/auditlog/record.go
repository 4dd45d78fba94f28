package auditlog

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/sluicehq/sluice/internal/audit/tree"
	"github.com/sluicehq/sluice/internal/model"
	"github.com/sluicehq/sluice/internal/store"
)

// DayRecord is the seal of one stream-day: where the day's events sit in
// the stream's tree, the tree's compact frontier after them, the
// consistency proof from the previous seal's tree, and the signed
// checkpoint. It is kept when retention drops the day's events.
type DayRecord struct {
	Day         string      `json:"day"`         // YYYY-MM-DD (UTC)
	Start       int64       `json:"start"`       // index of the day's first leaf
	Size        int64       `json:"size"`        // tree size after the day
	Frontier    []tree.Hash `json:"frontier"`    // compact frontier of the tree of Size leaves
	Consistency []tree.Hash `json:"consistency"` // RFC 6962 proof from the previous seal's size to Size
	Checkpoint  string      `json:"checkpoint"`  // C2SP signed note of the tlog-checkpoint (origin, Size, root)
	SealedAt    time.Time   `json:"sealed_at"`
	// DroppedAt is set when retention dropped the day's events.
	DroppedAt *time.Time `json:"dropped_at,omitempty"`

	day model.Day
}

// Events is the number of the day's events.
func (r *DayRecord) Events() int64 { return r.Size - r.Start }

// frontier returns the record's frontier.
func (r *DayRecord) frontier() tree.Frontier {
	return tree.Frontier{Size: r.Size, Hashes: r.Frontier}
}

func decodeRecord(s store.AuditSeal) (*DayRecord, error) {
	var r DayRecord
	if err := json.Unmarshal(s.Record, &r); err != nil {
		return nil, fmt.Errorf("seal of %s/%s/%s: %w", s.Tenant, s.Stream, s.Day, err)
	}
	d, err := model.ParseDay(r.Day)
	if err != nil || d != s.Day {
		return nil, fmt.Errorf("seal of %s/%s/%s: names day %q", s.Tenant, s.Stream, s.Day, r.Day)
	}
	r.day = d
	return &r, nil
}

func encodeRecord(r *DayRecord) []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // only plain values
	}
	return b
}

// Origin returns the log origin of a stream: the key name, the tenant and
// the stream, joined by '/'. Bytes other than A-Z a-z 0-9 . _ : - are
// written as %XX, so an origin never holds a space or '+'.
func Origin(keyName, tenant, stream string) string {
	return keyName + "/" + escape(tenant) + "/" + escape(stream)
}

func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// OpenCheckpoint verifies a signed checkpoint note with the known keys and
// returns its body.
func OpenCheckpoint(msg []byte, known note.Verifiers) (tree.Checkpoint, error) {
	n, err := note.Open(msg, known)
	if err != nil {
		return tree.Checkpoint{}, fmt.Errorf("open checkpoint: %w", err)
	}
	return tree.ParseCheckpoint([]byte(n.Text))
}

// SignCheckpoint signs a checkpoint as a note.
func SignCheckpoint(c tree.Checkpoint, s note.Signer) ([]byte, error) {
	msg, err := note.Sign(&note.Note{Text: string(c.Marshal())}, s)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	return msg, nil
}

// Export is what 'query audit checkpoints' writes: every seal of a stream
// in a day range, with the public keys that verify them.
type Export struct {
	Origin     string      `json:"origin"`
	PublicKeys []string    `json:"public_keys"`
	Days       []DayRecord `json:"days"`
}

// VerifiersOf builds the verifiers of an export's public keys.
func VerifiersOf(keys []string) (note.Verifiers, error) {
	var vs []note.Verifier
	for _, k := range slices.Compact(slices.Sorted(slices.Values(keys))) {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, fmt.Errorf("public key %q: %w", k, err)
		}
		vs = append(vs, v)
	}
	return note.VerifierList(vs...), nil
}
