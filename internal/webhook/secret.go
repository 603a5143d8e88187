package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/agentd/agentd/internal/secrets"
)

// The headers of a delivery, as Standard Webhooks names them.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// secretPrefix starts a signing secret as Standard Webhooks writes one:
// whsec_ and the base64 of its bytes.
const secretPrefix = "whsec_"

// NewSecret returns a new signing secret: whsec_ and the base64 of 32
// random bytes.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// CheckSecret refuses a secret a client gives that Standard Webhooks
// cannot sign with, or too short to be one: whsec_ and the base64 of 24
// to 64 bytes.
func CheckSecret(s string) error {
	raw, ok := decodeSecret(s)
	if !ok {
		return fmt.Errorf("must be %q and the standard base64 of 24 to 64 random bytes", secretPrefix)
	}
	if len(raw) < 24 || len(raw) > 64 {
		return fmt.Errorf("must hold 24 to 64 bytes, not %d", len(raw))
	}
	return nil
}

func decodeSecret(s string) ([]byte, bool) {
	if len(s) <= len(secretPrefix) || s[:len(secretPrefix)] != secretPrefix {
		return nil, false
	}
	raw, err := base64.StdEncoding.DecodeString(s[len(secretPrefix):])
	return raw, err == nil
}

// secretAD binds a sealed secret to its tenant: another tenant's row
// cannot be made to sign with it.
func secretAD(tenant string) []byte { return []byte("webhook-secret:" + tenant) }

// Seal seals a tenant's signing secret under the server's key.
func Seal(box *secrets.Box, tenant, secret string) (string, error) {
	return box.Seal([]byte(secret), secretAD(tenant))
}

// open opens a tenant's sealed signing secret.
func open(box *secrets.Box, tenant, sealed string) (string, error) {
	b, err := box.Open(sealed, secretAD(tenant))
	return string(b), err
}

// Sign sets the Standard Webhooks headers of a delivery's request: its
// id, the attempt's time, and the signature of both with the body under
// secret.
func Sign(h http.Header, secret, id string, at time.Time, body []byte) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("signing secret: %w", err)
	}
	sig, err := wh.Sign(id, at, body)
	if err != nil {
		return err
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}
