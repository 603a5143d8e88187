package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the size of a server key: 32 bytes (AES-256).
const KeySize = 32

// prefix marks a sealed value of this format.
const prefix = "v1:"

// ErrNoKey: the server has no key, so nothing can be sealed or opened.
var ErrNoKey = errors.New("the server has no secret key (AGENTD_SECRET_KEY)")

// Box seals and opens values under one key. The zero Box (or a nil one) has
// no key: Seal and Open return ErrNoKey.
type Box struct {
	aead cipher.AEAD
}

// ParseKey reads a server key: the standard base64 of 32 random bytes
// (`openssl rand -base64 32`).
func ParseKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("secret key: not base64: %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret key: %d bytes, want %d (openssl rand -base64 32)", len(key), KeySize)
	}
	return key, nil
}

// New returns a Box over key, which must be KeySize bytes.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret key: %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// HasKey reports whether b can seal and open.
func (b *Box) HasKey() bool { return b != nil && b.aead != nil }

// Seal returns plaintext sealed, bound to ad: "v1:" and the base64 of a
// random nonce and the ciphertext.
func (b *Box) Seal(plaintext, ad []byte) (string, error) {
	if !b.HasKey() {
		return "", ErrNoKey
	}
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	sealed := b.aead.Seal(nonce, nonce, plaintext, ad)
	return prefix + base64.StdEncoding.EncodeToString(sealed), nil
}

// Open returns the plaintext of a value Seal made with the same key and ad;
// an error for any other (another key, another ad, a changed value).
func (b *Box) Open(sealed string, ad []byte) ([]byte, error) {
	if !b.HasKey() {
		return nil, ErrNoKey
	}
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, errors.New("secrets: not a sealed value")
	}
	raw, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(raw) < b.aead.NonceSize() {
		return nil, errors.New("secrets: not a sealed value")
	}
	n := b.aead.NonceSize()
	plain, err := b.aead.Open(nil, raw[:n], raw[n:], ad)
	if err != nil {
		return nil, errors.New("secrets: the value does not open with this key (another key, or it was changed or moved)")
	}
	return plain, nil
}
