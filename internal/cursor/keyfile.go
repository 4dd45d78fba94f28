package cursor

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// LoadKey reads a key file: its content, without surrounding white space,
// is the key (e.g. the output of `openssl rand -hex 32`), at least KeySize
// bytes.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cursor key: %w", err)
	}
	key := bytes.TrimSpace(b)
	if len(key) < KeySize {
		return nil, fmt.Errorf("cursor key %s: want at least %d bytes, got %d", path, KeySize, len(key))
	}
	return key, nil
}

// LoadKeys returns Keys for the key in the file at path (LoadKey).
func LoadKeys(path string) (*Keys, error) {
	key, err := LoadKey(path)
	if err != nil {
		return nil, err
	}
	return New(key)
}

// LoadOrCreateKeys returns Keys for the key in the file at path, written
// first when there is none (LoadOrCreateKey).
func LoadOrCreateKeys(path string) (*Keys, error) {
	key, err := LoadOrCreateKey(path)
	if err != nil {
		return nil, err
	}
	return New(key)
}

// LoadOrCreateKey reads the key file at path, or, when there is none,
// writes one with a fresh random key (readable by the owner only), so that
// cursors survive a restart.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	var raw [KeySize]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, fmt.Errorf("generate cursor key: %w", err)
	}
	key = []byte(hex.EncodeToString(raw[:]))
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create cursor key: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".cursor-key-*")
	if err != nil {
		return nil, fmt.Errorf("create cursor key: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful link, only the temporary name goes
	_, werr := tmp.Write(append(key, '\n'))
	if serr := tmp.Sync(); werr == nil {
		werr = serr
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, fmt.Errorf("write cursor key: %w", werr)
	}
	// Link fails if another process created the key meanwhile: use its key.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadKey(path)
		}
		return nil, fmt.Errorf("write cursor key: %w", err)
	}
	return key, nil
}
