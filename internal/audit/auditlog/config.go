package auditlog

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// Config is the audit log's configuration (the audit.* keys).
type Config struct {
	// Enabled turns sealing, checkpoints and the late-event rule on.
	Enabled bool `mapstructure:"enabled"`
	// KeyFile holds the signing key, as written by 'ingest audit keygen'
	// (a note signer key: PRIVATE+KEY+<name>+<hash>+<key>).
	KeyFile string `mapstructure:"key_file"`
	// VerifierKeys are earlier public keys (note verifier keys) whose
	// checkpoints stay valid after a key rotation.
	VerifierKeys []string `mapstructure:"verifier_keys"`
	// AcceptLate is how long after a UTC day ends its events are still
	// accepted.
	AcceptLate time.Duration `mapstructure:"accept_late"`
	// SealDelay is how long after a day ends it is sealed; at least
	// AcceptLate plus MinSealGap.
	SealDelay time.Duration `mapstructure:"seal_delay"`
	// CheckpointInterval is how often the sealer looks for days to seal: a
	// day gets its checkpoint at most this long after SealDelay.
	CheckpointInterval time.Duration `mapstructure:"checkpoint_interval"`
	// SealLookback is how far back the sealer looks for unsealed days.
	SealLookback time.Duration `mapstructure:"seal_lookback"`
}

// MinSealGap is the least time between the last accepted write of a day and
// its seal: it covers a write admitted just before AcceptLate ran out and
// still being committed, and clock differences between gateways.
const MinSealGap = 10 * time.Minute

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Enabled:            false,
		KeyFile:            "",
		VerifierKeys:       []string{},
		AcceptLate:         time.Hour,
		SealDelay:          90 * time.Minute,
		CheckpointInterval: 5 * time.Minute,
		SealLookback:       7 * 24 * time.Hour,
	}
}

// Validate reports every bad setting.
func (c Config) Validate() error {
	var errs []error
	if c.Enabled && c.KeyFile == "" {
		errs = append(errs, errors.New("audit.key_file: required when audit.enabled is true (create one with: ingest audit keygen --name NAME --out FILE)"))
	}
	for i, k := range c.VerifierKeys {
		if _, err := note.NewVerifier(k); err != nil {
			errs = append(errs, fmt.Errorf("audit.verifier_keys[%d]: %q is not a verifier key (name+hash+base64): %w", i, k, err))
		}
	}
	if c.AcceptLate < 0 || c.AcceptLate > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("audit.accept_late: must be between 0s and 168h, got %s", c.AcceptLate))
	}
	if c.SealDelay < c.AcceptLate+MinSealGap || c.SealDelay > 8*24*time.Hour {
		errs = append(errs, fmt.Errorf("audit.seal_delay: must be at least audit.accept_late (%s) + %s and at most 192h, got %s", c.AcceptLate, MinSealGap, c.SealDelay))
	}
	if c.CheckpointInterval < time.Second || c.CheckpointInterval > 24*time.Hour {
		errs = append(errs, fmt.Errorf("audit.checkpoint_interval: must be between 1s and 24h, got %s", c.CheckpointInterval))
	}
	if c.SealLookback < 24*time.Hour || c.SealLookback > 366*24*time.Hour {
		errs = append(errs, fmt.Errorf("audit.seal_lookback: must be between 24h and 8784h, got %s", c.SealLookback))
	}
	return errors.Join(errs...)
}

// Keys are the signing key and every key whose signatures verify.
type Keys struct {
	Signer    note.Signer
	Verifiers note.Verifiers
	// Public lists the verifier keys, current first, as published with
	// exported checkpoints.
	Public []string
}

// LoadKeys reads the signing key file and the earlier verifier keys.
func LoadKeys(c Config) (*Keys, error) {
	raw, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("audit.key_file: %w", err)
	}
	return ParseKeys(strings.TrimSpace(string(raw)), c.VerifierKeys)
}

// ParseKeys builds Keys from a signer key and earlier verifier keys.
func ParseKeys(skey string, older []string) (*Keys, error) {
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("audit.key_file: not a signer key (PRIVATE+KEY+name+hash+base64): %w", err)
	}
	pub, err := PublicKey(skey)
	if err != nil {
		return nil, err
	}
	// The current key first; an older key listed twice, or the current one
	// listed again, is kept once (a verifier list with a key twice makes
	// note.Open refuse every note as ambiguous).
	k := &Keys{Signer: s, Public: []string{pub}}
	for _, vk := range older {
		if !slices.Contains(k.Public, vk) {
			k.Public = append(k.Public, vk)
		}
	}
	if k.Verifiers, err = VerifiersOf(k.Public); err != nil {
		return nil, fmt.Errorf("audit.verifier_keys: %w", err)
	}
	return k, nil
}

// PublicKey returns the verifier key of a signer key.
func PublicKey(skey string) (string, error) {
	// PRIVATE+KEY+name+hash+base64(0x01||seed): the verifier key is
	// name+hash+base64(0x01||public key).
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 || parts[0] != "PRIVATE" || parts[1] != "KEY" {
		return "", errors.New("audit.key_file: not a signer key (PRIVATE+KEY+name+hash+base64)")
	}
	return publicFromSigner(parts[2], parts[4])
}
