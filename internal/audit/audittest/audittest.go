// Package audittest holds what the audit log's tests share across
// backends: an independent verifier that uses only the formats documented
// in docs/audit.md (not Sluice's own code), and generators of test events.
package audittest

import (
	"bytes"
	"cmp"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/internal/model"
)

// Canonical is an independent implementation of the documented canonical
// form, for events whose attributes hold only strings, integers below 2^53,
// booleans, arrays and objects with ASCII member names: encoding/json
// sorts map keys by bytes, which for ASCII names is the JCS order, and
// writes such values exactly as JCS does once HTML escaping is off.
func Canonical(e model.AuditEvent) []byte {
	m := map[string]any{"action": e.Action, "actor": e.Actor, "event_id": e.EventID, "outcome": e.Outcome,
		"resource": e.Resource, "stream": e.Stream, "ts": e.TS}
	if len(e.Attributes) > 0 {
		var a any
		d := json.NewDecoder(bytes.NewReader(e.Attributes))
		d.UseNumber()
		if err := d.Decode(&a); err != nil {
			m["attributes_raw"] = base64.StdEncoding.EncodeToString(e.Attributes)
		} else {
			m["attributes"] = a
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// LeafHash is SHA-256(0x00 || data).
func LeafHash(data []byte) [32]byte { return sha256.Sum256(append([]byte{0}, data...)) }

func nodeHash(l, r []byte) []byte {
	h := sha256.Sum256(append(append([]byte{1}, l...), r...))
	return h[:]
}

// Root is RFC 6962's MTH over leaf hashes.
func Root(leaves [][32]byte) [32]byte {
	if len(leaves) == 0 {
		return sha256.Sum256(nil)
	}
	if len(leaves) == 1 {
		return leaves[0]
	}
	k := 1
	for k*2 < len(leaves) {
		k *= 2
	}
	l, r := Root(leaves[:k]), Root(leaves[k:])
	var out [32]byte
	copy(out[:], nodeHash(l[:], r[:]))
	return out
}

// Checkpoint is a checkpoint opened by hand.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   [32]byte
}

// OpenNote checks a C2SP signed note against one verifier key
// (name+hash+base64(0x01||key)) and parses its checkpoint body.
func OpenNote(msg, vkey string) (Checkpoint, error) {
	var c Checkpoint
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return c, errors.New("bad vkey")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 33 || raw[0] != 1 {
		return c, errors.New("bad vkey key")
	}
	pub := ed25519.PublicKey(raw[1:])
	i := strings.LastIndex(msg, "\n\n")
	if i < 0 {
		return c, errors.New("no signature block")
	}
	text, sigs := msg[:i+1], msg[i+2:]
	ok := false
	for _, line := range strings.Split(strings.TrimSuffix(sigs, "\n"), "\n") {
		rest, found := strings.CutPrefix(line, "— "+parts[0]+" ")
		if !found {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(rest)
		if err != nil || len(sig) != 68 {
			return c, errors.New("bad signature line")
		}
		id, _ := strconv.ParseUint(parts[1], 16, 32)
		if binary.BigEndian.Uint32(sig) != uint32(id) {
			continue
		}
		if !ed25519.Verify(pub, []byte(text), sig[4:]) {
			return c, errors.New("signature does not verify")
		}
		ok = true
	}
	if !ok {
		return c, errors.New("no signature by the key")
	}
	lines := strings.Split(text, "\n")
	if len(lines) != 4 {
		return c, fmt.Errorf("checkpoint body has %d lines", len(lines)-1)
	}
	c.Origin = lines[0]
	if c.Size, err = strconv.ParseInt(lines[1], 10, 64); err != nil {
		return c, err
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != 32 {
		return c, errors.New("bad root")
	}
	copy(c.Root[:], root)
	return c, nil
}

// VerifyInclusion is RFC 9162 §2.1.3.2.
func VerifyInclusion(index, size int64, leaf [32]byte, path [][]byte, root [32]byte) error {
	if index >= size {
		return errors.New("index out of range")
	}
	fn, sn := index, size-1
	r := leaf[:]
	for _, p := range path {
		if sn == 0 {
			return errors.New("proof too long")
		}
		if fn&1 == 1 || fn == sn {
			r = nodeHash(p, r)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = nodeHash(r, p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 || !bytes.Equal(r, root[:]) {
		return errors.New("inclusion proof does not verify")
	}
	return nil
}

// VerifyConsistency is RFC 9162 §2.1.4.2.
func VerifyConsistency(first, second int64, firstRoot, secondRoot [32]byte, path [][]byte) error {
	if first == second {
		if len(path) != 0 || firstRoot != secondRoot {
			return errors.New("equal sizes need an empty proof and equal roots")
		}
		return nil
	}
	if first < 1 || first > second || len(path) == 0 {
		return errors.New("bad sizes or empty proof")
	}
	if first&(first-1) == 0 {
		path = append([][]byte{firstRoot[:]}, path...)
	}
	fn, sn := first-1, second-1
	for fn&1 == 1 {
		fn >>= 1
		sn >>= 1
	}
	fr, sr := path[0], path[0]
	for _, c := range path[1:] {
		if sn == 0 {
			return errors.New("proof too long")
		}
		if fn&1 == 1 || fn == sn {
			fr = nodeHash(c, fr)
			sr = nodeHash(c, sr)
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			sr = nodeHash(sr, c)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 || !bytes.Equal(fr, firstRoot[:]) || !bytes.Equal(sr, secondRoot[:]) {
		return errors.New("consistency proof does not verify")
	}
	return nil
}

// ParseProofLines decodes base64 proof lines.
func ParseProofLines(lines []string) ([][]byte, error) {
	var out [][]byte
	for _, l := range lines {
		h, err := base64.StdEncoding.DecodeString(l)
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("bad proof line %q", l)
		}
		out = append(out, h)
	}
	return out, nil
}

// Events returns n random events of a stream on day d, sorted by (ts,
// event_id), with attributes of strings, integers, booleans and nesting.
func Events(rng *rand.Rand, stream string, d model.Day, n int, prefix string) []model.AuditEvent {
	out := make([]model.AuditEvent, 0, n)
	for i := range n {
		e := model.AuditEvent{
			EventID:  fmt.Sprintf("%s-%s-%05d", prefix, d, i),
			Stream:   stream,
			TS:       d.Start() + rng.Int64N(model.MillisPerDay),
			Actor:    fmt.Sprintf("user-%d", rng.IntN(50)),
			Action:   []string{"login", "logout", "update", "delete"}[rng.IntN(4)],
			Resource: fmt.Sprintf("/r/%d", rng.IntN(1000)),
			Outcome:  []string{"success", "failure"}[rng.IntN(2)],
		}
		if rng.IntN(4) > 0 {
			e.Attributes = RandomAttributes(rng)
		}
		out = append(out, e)
	}
	SortEvents(out)
	return out
}

// RandomAttributes returns a compact JSON object.
func RandomAttributes(rng *rand.Rand) []byte {
	m := map[string]any{"ip": fmt.Sprintf("10.0.%d.%d", rng.IntN(256), rng.IntN(256)), "n": rng.IntN(1 << 40),
		"ok": rng.IntN(2) == 0, "tags": []any{"a", rng.IntN(9)}, "nested": map[string]any{"z": "é", "a": rng.IntN(100)}}
	b, _ := json.Marshal(m)
	return b
}

// SortEvents sorts by (ts, event_id).
func SortEvents(es []model.AuditEvent) {
	slices.SortFunc(es, func(a, b model.AuditEvent) int {
		return cmp.Or(cmp.Compare(a.TS, b.TS), strings.Compare(a.EventID, b.EventID))
	})
}
