package auditlog

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/note"
)

// GenerateKey returns a new Ed25519 signer key and its verifier key, named
// name (the checkpoints' key name; a host name such as audit.example.com).
func GenerateKey(name string) (skey, vkey string, err error) {
	skey, vkey, err = note.GenerateKey(rand.Reader, name)
	if err != nil {
		return "", "", fmt.Errorf("generate key %q: %w", name, err)
	}
	return skey, vkey, nil
}

func publicFromSigner(name, b64 string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("audit.key_file: not an Ed25519 signer key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vkey, err := note.NewEd25519VerifierKey(name, pub)
	if err != nil {
		return "", fmt.Errorf("audit.key_file: %w", err)
	}
	return vkey, nil
}
