package auth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestTwoAuthorizationHeaders: a request with two Authorization headers is
// refused as an invalid credential by every authenticator that reads one,
// whichever of them holds a good credential, even when both do (the same
// one twice, or two tenants' keys), and one header still works.
func TestTwoAuthorizationHeaders(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	keys := auth.NewKeys(auth.KeysConfig{Store: store})
	acme, _ := insertKey(t, store, "acme", auth.RunsRead)
	globex, _ := insertKey(t, store, "globex", auth.Admin)
	p := newProvider(t)
	o := newOIDC(t, p, true, nil)
	jwt := sign(t, p.key(0), p.claims(nil))
	for name, a := range map[string]auth.Authenticator{"keys": keys, "oidc": o, "either": auth.Either(keys, o)} {
		good := acme
		if name == "oidc" {
			good = jwt
		}
		if _, err := a.Authenticate(t.Context(), bearerRequest(good)); err != nil {
			t.Fatalf("%s: one header: %v", name, err)
		}
		for _, pair := range [][2]string{{"Bearer " + good, "Bearer " + good}, {"Bearer " + good, "Bearer " + globex},
			{"Bearer " + globex, "Bearer " + good}, {"Bearer " + good, ""}, {"", "Bearer " + good}, {"Bearer " + jwt, "Bearer " + acme}} {
			r := httptest.NewRequest(http.MethodGet, "/runs", nil)
			r.Header.Add("Authorization", pair[0])
			r.Header.Add("Authorization", pair[1])
			got, err := a.Authenticate(t.Context(), r)
			if !errors.Is(err, auth.ErrInvalidCredential) || !strings.Contains(err.Error(), "2 Authorization headers") {
				t.Errorf("%s: two Authorization headers (%.20q, %.20q): principal %+v, error %v; want ErrInvalidCredential",
					name, pair[0], pair[1], got, err)
			}
		}
	}
}
