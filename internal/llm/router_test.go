package llm_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// endpoint is a fake model on a port of its own that keeps the headers of
// each request it got.
type endpoint struct {
	fake *fakellm.Server
	srv  *httptest.Server
	mu   sync.Mutex
	seen []http.Header
}

func newEndpoint(t *testing.T) *endpoint {
	t.Helper()
	e := &endpoint{fake: fakellm.New()}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.seen = append(e.seen, r.Header.Clone())
		e.mu.Unlock()
		e.fake.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) url() string { return e.srv.URL + "/v1" }

// last returns the model name and the headers of the last request e got.
func (e *endpoint) last(t *testing.T) (string, http.Header) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	reqs := e.fake.Requests()
	if len(reqs) == 0 || len(e.seen) != len(reqs) {
		t.Fatalf("%s: %d requests, %d headers", e.srv.URL, len(reqs), len(e.seen))
	}
	return reqs[len(reqs)-1].Model, e.seen[len(e.seen)-1]
}

// TestRouter: each model's requests reach the endpoint it is routed to,
// with that endpoint's key and under its name there; a model the routes
// do not name goes to the default endpoint.
func TestRouter(t *testing.T) {
	t.Parallel()
	a, b := newEndpoint(t), newEndpoint(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	env := map[string]string{"EAST_KEY": "key-of-east-0123", "WEST_KEY": "key-of-west-4567"}
	routes := map[string]llm.Route{
		"east":   {Provider: llm.ProviderOpenAI, BaseURL: b.url(), APIKeyEnv: "EAST_KEY", Model: "fake-east"},
		"east-2": {Provider: llm.ProviderOpenAI, BaseURL: b.url(), APIKeyEnv: "EAST_KEY"},
		"west":   {Provider: llm.ProviderOpenAI, BaseURL: a.url(), APIKeyEnv: "WEST_KEY"},
		"open":   {Provider: llm.ProviderOpenAI, BaseURL: b.url()},
		"alias":  {Model: "fake-alias"},
	}
	r, err := llm.NewRouter(routes, llm.OpenAIConfig{BaseURL: a.url(), APIKey: "key-of-default-89",
		HTTPClient: &http.Client{Transport: tr}}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer r.CloseIdleConnections()
	tests := []struct {
		model    string
		at       *endpoint
		upstream string
		auth     string
	}{
		{"east", b, "fake-east", "Bearer key-of-east-0123"},
		{"east-2", b, "east-2", "Bearer key-of-east-0123"},
		{"west", a, "west", "Bearer key-of-west-4567"},
		{"open", b, "open", ""},
		{"alias", a, "fake-alias", "Bearer key-of-default-89"},
		{"gamma", a, "gamma", "Bearer key-of-default-89"},
	}
	for _, tt := range tests {
		resp, err := r.Stream(t.Context(), llm.Request{Model: tt.model,
			Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "/say from "+tt.model)}}, nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.model, err)
		}
		if resp.Text != "from "+tt.model || resp.FinishReason != llm.FinishStop {
			t.Fatalf("%s: response %+v", tt.model, resp)
		}
		model, h := tt.at.last(t)
		if model != tt.upstream || h.Get("Authorization") != tt.auth {
			t.Errorf("%s: reached %s as model %q with Authorization %q, want %q with %q",
				tt.model, tt.at.srv.URL, model, h.Get("Authorization"), tt.upstream, tt.auth)
		}
	}
	if n, m := a.fake.Calls(), b.fake.Calls(); n != 3 || m != 3 {
		t.Fatalf("calls: %d at the default's port, %d at the other's; want 3 and 3", n, m)
	}
}

// TestRouterRefusesBadRoutes: a route to a provider agentd does not know, a
// key variable that is not set, a base URL that is none, are errors at
// start-up that name the model, all reported at once.
func TestRouterRefusesBadRoutes(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string {
		if k == "SET_KEY" {
			return "a-key-that-is-set"
		}
		return ""
	}
	tests := []struct {
		name   string
		routes map[string]llm.Route
		want   []string
	}{
		{"unknown provider", map[string]llm.Route{"gemini": {Provider: "google", APIKeyEnv: "SET_KEY"}},
			[]string{`model "gemini"`, `provider "google" is not one agentd knows (openai, anthropic)`}},
		{"key not set", map[string]llm.Route{"gpt-eu": {Provider: "openai", BaseURL: "https://eu.example.com/v1", APIKeyEnv: "EU_KEY"}},
			[]string{`model "gpt-eu"`, "api_key_env names EU_KEY, which is not set"}},
		{"base url", map[string]llm.Route{"m": {Provider: "openai", BaseURL: "eu.example.com/v1"}},
			[]string{`model "m"`, "is not an http or https URL"}},
		{"no provider", map[string]llm.Route{"m": {BaseURL: "https://eu.example.com/v1"}},
			[]string{`model "m"`, "need a provider"}},
		{"all at once", map[string]llm.Route{
			"good":   {Provider: "openai", APIKeyEnv: "SET_KEY"},
			"gemini": {Provider: "google"},
			"gpt-eu": {Provider: "openai", APIKeyEnv: "EU_KEY"},
		}, []string{`model "gemini"`, `model "gpt-eu"`, "EU_KEY"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := llm.NewRouter(tt.routes, llm.OpenAIConfig{APIKey: "k"}, getenv)
			if err == nil {
				r.CloseIdleConnections()
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "a-key-that-is-set") {
				t.Errorf("error %q holds a key", err)
			}
		})
	}
}

// TestRouterKeepsTheDefaultsCredentials: the OPENAI_* environment is the
// default endpoint's (zero configuration); a routed endpoint gets none of
// it: not its key, not its admin key, organization, project or custom
// headers. (t.Setenv: not parallel.)
func TestRouterKeepsTheDefaultsCredentials(t *testing.T) {
	a, b := newEndpoint(t), newEndpoint(t)
	t.Setenv("OPENAI_BASE_URL", a.url())
	t.Setenv("OPENAI_API_KEY", "key-of-the-environment")
	t.Setenv("OPENAI_ADMIN_KEY", "admin-key-of-the-environment")
	t.Setenv("OPENAI_ORG_ID", "org-environment")
	t.Setenv("OPENAI_PROJECT_ID", "proj-environment")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-Proxy-Auth: proxy-secret\nX-Other: other")
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	r, err := llm.NewRouter(map[string]llm.Route{
		"routed": {Provider: llm.ProviderOpenAI, BaseURL: b.url()},
	}, llm.OpenAIConfig{HTTPClient: &http.Client{Transport: tr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.CloseIdleConnections()
	for _, model := range []string{"unrouted", "routed"} {
		req := user("hi")
		req.Model = model
		if _, err := r.Stream(t.Context(), req, nil); err != nil {
			t.Fatalf("%s: %v", model, err)
		}
	}
	_, h := a.last(t)
	if h.Get("Authorization") != "Bearer key-of-the-environment" || h.Get("OpenAI-Organization") != "org-environment" ||
		h.Get("X-Proxy-Auth") != "proxy-secret" {
		t.Fatalf("the default endpoint did not get the environment's configuration: %v", h)
	}
	_, h = b.last(t)
	for _, name := range []string{"Authorization", "OpenAI-Organization", "OpenAI-Project", "X-Proxy-Auth", "X-Other"} {
		if v := h.Get(name); v != "" {
			t.Errorf("the routed endpoint got %s: %q", name, v)
		}
	}
}
