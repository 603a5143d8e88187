package compact

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

func TestFor(t *testing.T) {
	t.Parallel()
	gpt4o := Profile{ContextWindow: 128000, MaxOutputTokens: 16384}
	gpt4oMini := Profile{ContextWindow: 128000, MaxOutputTokens: 16384}
	tests := []struct {
		name  string
		model string
		want  Profile
	}{
		{"exact", "gpt-4o", gpt4o},
		{"exact gpt-4.1", "gpt-4.1", Profile{ContextWindow: 1047576, MaxOutputTokens: 32768}},
		{"exact o3", "o3", Profile{ContextWindow: 200000, MaxOutputTokens: 100000}},
		{"exact gpt-5", "gpt-5", Profile{ContextWindow: 400000, MaxOutputTokens: 128000}},
		{"exact gpt-3.5-turbo", "gpt-3.5-turbo", Profile{ContextWindow: 16385, MaxOutputTokens: 4096}},
		{"dated variant", "gpt-4o-2024-08-06", gpt4o},
		{"suffixed variant", "gpt-4o-audio-preview", gpt4o},
		{"longest prefix wins", "gpt-4o-mini-2024-07-18", gpt4oMini},
		{"longest prefix wins, gpt-4.1", "gpt-4.1-nano-2025-04-14", Profile{ContextWindow: 1047576, MaxOutputTokens: 32768}},
		{"o1-mini is not o1", "o1-mini-2024-09-12", Profile{ContextWindow: 128000, MaxOutputTokens: 65536}},
		{"dated gpt-5", "gpt-5-2025-08-07", Profile{ContextWindow: 400000, MaxOutputTokens: 128000}},
		{"a prefix without a dash is no variant", "gpt-4os", Fallback},
		{"a prefix without a dash is no variant, o3", "o3x", Fallback},
		{"fake", "fake", Profile{}},
		{"fake-1k", "fake-1k", Profile{ContextWindow: 1024, MaxOutputTokens: 256}},
		{"fake-4k", "fake-4k", Profile{ContextWindow: 4096, MaxOutputTokens: 256}},
		{"fake-128k", "fake-128k", Profile{ContextWindow: 131072, MaxOutputTokens: 256}},
		{"fake-0k", "fake-0k", Fallback},
		{"fake-xk", "fake-xk", Fallback},
		{"fake-04k", "fake-04k", Fallback},
		{"fake-k", "fake-k", Fallback},
		{"fake-4", "fake-4", Fallback},
		{"fake-too-large", "fake-1048577k", Fallback},
		{"fake-1", "fake-1", Fallback},
		{"unknown", "llama-3-70b", Fallback},
		{"empty", "", Fallback},
	}
	p := DefaultProfiles()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := p.For(tt.model); !sameLimits(got, tt.want) {
				t.Errorf("For(%q) = %+v, want %+v", tt.model, got, tt.want)
			}
			var nilProfiles *Profiles
			if got := nilProfiles.For(tt.model); !sameLimits(got, tt.want) {
				t.Errorf("nil For(%q) = %+v, want %+v", tt.model, got, tt.want)
			}
		})
	}
}

// TestBuiltinProfilesValid checks the built-in profiles against the rules a
// models file must follow, and that DefaultProfiles names every one asked of
// it.
func TestBuiltinProfilesValid(t *testing.T) {
	t.Parallel()
	names := []string{"gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "o1", "o3",
		"o3-mini", "o4-mini", "gpt-5", "gpt-5-mini", "gpt-5-nano", "gpt-4-turbo", "gpt-3.5-turbo"}
	p := DefaultProfiles()
	for _, n := range names {
		if _, ok := p.byName[n]; !ok {
			t.Errorf("no built-in profile for %s", n)
		}
	}
	for n, prof := range p.byName {
		w, m := prof.ContextWindow, prof.MaxOutputTokens
		if _, err := (&fileProfile{ContextWindow: &w, MaxOutputTokens: &m}).profile(); err != nil || prof.CompactAt != 0 {
			t.Errorf("built-in %s: %+v: %v", n, prof, err)
		}
	}
}

// writeFile writes body to a models file in a temporary directory and
// returns its path.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadProfiles(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `{"models": {
		"llama-3-70b": {"context_window": 8192, "max_output_tokens": 2048, "compact_at": 0.5},
		"gpt-4o": {"context_window": 64000, "max_output_tokens": 1000},
		"local-unbounded": {"context_window": 0},
		"fake": {"context_window": 2048, "max_output_tokens": 100},
		"fake-2k": {"context_window": 3000, "max_output_tokens": 10}
	}}`)
	p, err := LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		model string
		want  Profile
	}{
		{"llama-3-70b", Profile{ContextWindow: 8192, MaxOutputTokens: 2048, CompactAt: 0.5}},
		{"llama-3-70b-instruct", Profile{ContextWindow: 8192, MaxOutputTokens: 2048, CompactAt: 0.5}},
		// The file's entry replaces the built-in one, for its variants too.
		{"gpt-4o", Profile{ContextWindow: 64000, MaxOutputTokens: 1000}},
		{"gpt-4o-2024-08-06", Profile{ContextWindow: 64000, MaxOutputTokens: 1000}},
		// Other built-ins are kept.
		{"gpt-4o-mini", Profile{ContextWindow: 128000, MaxOutputTokens: 16384}},
		{"o3", Profile{ContextWindow: 200000, MaxOutputTokens: 100000}},
		{"local-unbounded", Profile{}},
		// An exact name wins over the fake rule; a fake window over a
		// variant of "fake".
		{"fake", Profile{ContextWindow: 2048, MaxOutputTokens: 100}},
		{"fake-2k", Profile{ContextWindow: 3000, MaxOutputTokens: 10}},
		{"fake-4k", Profile{ContextWindow: 4096, MaxOutputTokens: 256}},
		{"fake-xk", Profile{ContextWindow: 2048, MaxOutputTokens: 100}},
		{"mystery", Fallback},
	}
	for _, tt := range tests {
		if got := p.For(tt.model); !sameLimits(got, tt.want) {
			t.Errorf("For(%q) = %+v, want %+v", tt.model, got, tt.want)
		}
	}
	// Loading a file does not change the defaults.
	if got := DefaultProfiles().For("gpt-4o"); !sameLimits(got, (Profile{ContextWindow: 128000, MaxOutputTokens: 16384})) {
		t.Errorf("defaults after a load: gpt-4o = %+v", got)
	}
}

func TestLoadProfilesEmpty(t *testing.T) {
	t.Parallel()
	p, err := LoadProfiles(writeFile(t, `{"models": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.For("gpt-5"); !sameLimits(got, (Profile{ContextWindow: 400000, MaxOutputTokens: 128000})) {
		t.Errorf("gpt-5 = %+v", got)
	}
}

func TestLoadProfilesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want string // a part of the error's text
	}{
		{"not JSON", `{"models": `, "unexpected EOF"},
		{"unknown top-level field", `{"models": {}, "defaults": {}}`, `unknown field "defaults"`},
		{"unknown model field", `{"models": {"m": {"context_window": 100, "context_windw": 5}}}`, `unknown field "context_windw"`},
		{"no models", `{}`, `no "models"`},
		{"null models", `{"models": null}`, `no "models"`},
		{"models not an object", `{"models": []}`, "not an object"},
		{"trailing data", `{"models": {}} {}`, "data after"},
		{"empty name", `{"models": {"": {"context_window": 100}}}`, "empty name"},
		{"name twice", `{"models": {"m": {"context_window": 100}, "m": {"context_window": 200}}}`, "given twice"},
		{"null profile", `{"models": {"m": null}}`, "null profile"},
		{"profile not an object", `{"models": {"m": 5}}`, `model "m"`},
		{"no context_window", `{"models": {"m": {"max_output_tokens": 10}}}`, "no context_window"},
		{"negative window", `{"models": {"m": {"context_window": -1}}}`, "negative"},
		{"fractional window", `{"models": {"m": {"context_window": 1000.5}}}`, `model "m"`},
		{"window as string", `{"models": {"m": {"context_window": "1000"}}}`, `model "m"`},
		{"negative output", `{"models": {"m": {"context_window": 100, "max_output_tokens": -1}}}`, "negative"},
		{"output equal to window", `{"models": {"m": {"context_window": 100, "max_output_tokens": 100}}}`, "not less than"},
		{"output over window", `{"models": {"m": {"context_window": 100, "max_output_tokens": 200}}}`, "not less than"},
		{"compact_at zero", `{"models": {"m": {"context_window": 100, "compact_at": 0}}}`, "compact_at"},
		{"compact_at one", `{"models": {"m": {"context_window": 100, "compact_at": 1}}}`, "compact_at"},
		{"compact_at negative", `{"models": {"m": {"context_window": 100, "compact_at": -0.5}}}`, "compact_at"},
		{"compact_at over one", `{"models": {"m": {"context_window": 100, "compact_at": 1.5}}}`, "compact_at"},
		{"empty provider", `{"models": {"m": {"context_window": 100, "provider": ""}}}`, "provider is empty"},
		{"empty model", `{"models": {"m": {"context_window": 100, "model": ""}}}`, "model is empty"},
		{"provider not a string", `{"models": {"m": {"context_window": 100, "provider": 1}}}`, `model "m"`},
		{"base_url without provider", `{"models": {"m": {"context_window": 100, "base_url": "http://h/v1"}}}`, "need a provider"},
		{"api_key_env without provider", `{"models": {"m": {"context_window": 100, "api_key_env": "K"}}}`, "need a provider"},
		{"api_key_env of a digit", `{"models": {"m": {"context_window": 100, "provider": "openai", "api_key_env": "1KEY"}}}`, "api_key_env is not the name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeFile(t, tt.body)
			p, err := LoadProfiles(path)
			if err == nil {
				t.Fatalf("no error; profiles %+v", p)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not say %q and the path", err, tt.want)
			}
		})
	}

	if _, err := LoadProfiles(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

// The provider fields route a model; Routes gives the routed models by
// their exact names, and a model the file does not route is not there.
func TestLoadProfilesRoutes(t *testing.T) {
	t.Parallel()
	p, err := LoadProfiles(writeFile(t, `{"models": {
		"eu-gpt": {"context_window": 128000, "max_output_tokens": 16384, "provider": "openai",
			"base_url": "https://eu.example.com/openai/v1", "api_key_env": "EU_OPENAI_KEY", "model": "gpt-4o-2024-08-06"},
		"local": {"context_window": 8192, "provider": "openai", "base_url": "http://127.0.0.1:8000/v1"},
		"claude": {"context_window": 200000, "provider": "anthropic", "api_key_env": "ANTHROPIC_API_KEY", "model": "claude-sonnet-4-5"},
		"alias": {"context_window": 128000, "model": "gpt-4o-mini"},
		"plain": {"context_window": 4096}
	}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]llm.Route{
		"eu-gpt": {Provider: "openai", BaseURL: "https://eu.example.com/openai/v1", APIKeyEnv: "EU_OPENAI_KEY", Model: "gpt-4o-2024-08-06"},
		"local":  {Provider: "openai", BaseURL: "http://127.0.0.1:8000/v1"},
		"claude": {Provider: "anthropic", APIKeyEnv: "ANTHROPIC_API_KEY", Model: "claude-sonnet-4-5"},
		"alias":  {Model: "gpt-4o-mini"},
	}
	if got := p.Routes(); !maps.Equal(got, want) {
		t.Fatalf("Routes() = %+v, want %+v", got, want)
	}
	// The router takes every provider the file names, anthropic too.
	r, err := llm.NewRouter(p.Routes(), llm.OpenAIConfig{APIKey: "k"}, func(string) string { return "a-key" })
	if err != nil {
		t.Fatalf("NewRouter: %v", err)
	}
	r.CloseIdleConnections()
	if got := p.For("eu-gpt"); !sameLimits(got, (Profile{ContextWindow: 128000, MaxOutputTokens: 16384, Route: want["eu-gpt"]})) {
		t.Fatalf("For(eu-gpt) = %+v", got)
	}
	if got := p.For("plain"); !sameLimits(got, (Profile{ContextWindow: 4096})) {
		t.Fatalf("For(plain) = %+v", got)
	}
	if DefaultProfiles().Routes() != nil || (*Profiles)(nil).Routes() != nil {
		t.Fatal("the built-in profiles route a model")
	}
}

// A key put in api_key_env by mistake is refused, and the error does not
// repeat it.
func TestLoadProfilesRefusesAKey(t *testing.T) {
	t.Parallel()
	const key = "sk-proj-abcdefghijklmnop1234567890"
	path := writeFile(t, `{"models": {"m": {"context_window": 100, "provider": "openai", "api_key_env": "`+key+`"}}}`)
	_, err := LoadProfiles(path)
	if err == nil || !strings.Contains(err.Error(), "never the key") {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "abcdefghij") {
		t.Fatalf("the error repeats the key: %v", err)
	}
}

// TestFakeWindowAgrees checks that For reads fake model names as the fake
// does: a name the fake gives a window gets that window; one it does not
// limit is "fake" (no limit) or unknown (Fallback).
func TestFakeWindowAgrees(t *testing.T) {
	t.Parallel()
	p := DefaultProfiles()
	for _, model := range []string{"fake", "fake-1k", "fake-4k", "fake-128k", "fake-1048576k",
		"fake-1048577k", "fake-0k", "fake-04k", "fake-xk", "fake-k", "fake--1k", "fake-+1k", "fake-1K"} {
		got, enforced := p.For(model), fakellm.ContextWindow(model)
		switch {
		case enforced > 0 && int64(got.ContextWindow) != enforced:
			t.Errorf("%s: window %d, the fake enforces %d", model, got.ContextWindow, enforced)
		case enforced == 0 && !sameLimits(got, Profile{}) && !sameLimits(got, Fallback):
			t.Errorf("%s: profile %+v for a model the fake does not limit", model, got)
		}
	}
}

func TestThreshold(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Profile
		want int
	}{
		{"no known limit", Profile{}, 0},
		{"no known limit, output set", Profile{MaxOutputTokens: 1000, CompactAt: 0.5}, 0},
		{"default compact_at", Profile{ContextWindow: 10000, MaxOutputTokens: 2000}, 6400},
		{"own compact_at", Profile{ContextWindow: 10000, MaxOutputTokens: 2000, CompactAt: 0.5}, 4000},
		{"rounded down", Profile{ContextWindow: 1024, MaxOutputTokens: 256}, 614}, // 768*0.8 = 614.4
		{"no output reserved", Profile{ContextWindow: 1000}, 800},
		{"fallback", Fallback, 99123}, // 123904*0.8 = 99123.2
		{"gpt-4o", DefaultProfiles().For("gpt-4o"), 89292},
		{"gpt-5", DefaultProfiles().For("gpt-5"), 217600},
		{"fake", DefaultProfiles().For("fake"), 0},
		{"fake-4k", DefaultProfiles().For("fake-4k"), 3072}, // (4096-256)*0.8
	}
	for _, tt := range tests {
		if got := tt.p.Threshold(); got != tt.want {
			t.Errorf("%s: %+v.Threshold() = %d, want %d", tt.name, tt.p, got, tt.want)
		}
	}
}

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	// The fake's rule: bytes/4 + 1 (internal/llm/fakellm/doc.go).
	for _, tt := range []struct{ bytes, want int }{{0, 1}, {3, 1}, {4, 2}, {4092, 1024}, {4096, 1025}} {
		if got := EstimateTokens(tt.bytes); got != tt.want {
			t.Errorf("EstimateTokens(%d) = %d, want %d", tt.bytes, got, tt.want)
		}
	}
}

// sameLimits reports whether a and b have the same limits and route.
func sameLimits(a, b Profile) bool {
	return a.ContextWindow == b.ContextWindow && a.MaxOutputTokens == b.MaxOutputTokens &&
		a.CompactAt == b.CompactAt && a.Route == b.Route
}
