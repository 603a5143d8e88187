package secrets_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/secrets"
)

func box(t *testing.T) *secrets.Box {
	t.Helper()
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	b, err := secrets.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSealOpen: a sealed value opens with its key and associated data, and
// with nothing else: not another key, not other data (another tenant's
// row), not a changed value; it does not hold the plaintext, and two seals
// of one value differ. Without a key nothing is sealed.
func TestSealOpen(t *testing.T) {
	b := box(t)
	sealed, err := b.Seal([]byte("Bearer s3cret"), []byte("acme/charge"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "s3cret") || !strings.HasPrefix(sealed, "v1:") {
		t.Fatalf("sealed %q", sealed)
	}
	if again, _ := b.Seal([]byte("Bearer s3cret"), []byte("acme/charge")); again == sealed {
		t.Fatal("two seals of one value are the same")
	}
	if plain, err := b.Open(sealed, []byte("acme/charge")); err != nil || string(plain) != "Bearer s3cret" {
		t.Fatalf("open: %q %v", plain, err)
	}
	if _, err := b.Open(sealed, []byte("other/charge")); err == nil {
		t.Fatal("opened with another tenant's data")
	}
	if _, err := box(t).Open(sealed, []byte("acme/charge")); err == nil {
		t.Fatal("opened with another key")
	}
	raw, _ := base64.StdEncoding.DecodeString(sealed[3:])
	raw[len(raw)-1] ^= 1
	if _, err := b.Open("v1:"+base64.StdEncoding.EncodeToString(raw), []byte("acme/charge")); err == nil {
		t.Fatal("opened a changed value")
	}
	var none *secrets.Box
	if _, err := none.Seal([]byte("x"), nil); !errors.Is(err, secrets.ErrNoKey) {
		t.Fatalf("seal without a key: %v", err)
	}
}

// TestParseKey: a key is the base64 of 32 bytes.
func TestParseKey(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(make([]byte, 32))
	if k, err := secrets.ParseKey(" " + good + "\n"); err != nil || len(k) != 32 {
		t.Fatalf("%v %v", k, err)
	}
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(make([]byte, 16))} {
		if _, err := secrets.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) took it", bad)
		}
	}
}
