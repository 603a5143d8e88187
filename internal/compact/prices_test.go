package compact

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/llm"
)

func TestProfileInputAndPrices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "models.json")
	body := `{"models": {
		"claude": {"context_window": 200000, "max_output_tokens": 8192, "provider": "anthropic",
			"prices": {"input": 3, "cached_input": 0.3, "cache_write": 3.75, "output": 15}},
		"texty": {"context_window": 8192, "input": ["text"]},
		"seeing": {"context_window": 8192, "input": ["text", "image"], "prices": {"input": 1, "output": 2}},
		"gpt-4o": {"context_window": 100000},
		"eu-4o": {"context_window": 100000, "model": "gpt-4o-2024-08-06"},
		"eu-35": {"context_window": 16000, "model": "gpt-3.5-turbo"}}}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProfiles(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		model, kind string
		want        bool
	}{
		{"claude", InputImage, true}, {"claude", InputFile, true}, // anthropic takes both
		{"texty", InputImage, false}, {"texty", InputText, true},
		{"seeing", InputImage, true}, {"seeing", InputFile, false},
		{"gpt-4o", InputImage, true}, {"gpt-3.5-turbo", InputImage, false},
		{"fake", InputFile, true}, {"unknown-model", InputImage, false},
		// A file entry without an input list takes what its model is known to.
		{"gpt-4o", InputImage, true}, {"eu-4o", InputImage, true}, {"eu-35", InputImage, false},
	} {
		if got := p.For(tt.model).Accepts(tt.kind); got != tt.want {
			t.Errorf("%s accepts %s = %v, want %v", tt.model, tt.kind, got, tt.want)
		}
	}
	u := llm.Usage{InputTokens: 1_000_000, CachedInputTokens: 500_000, CacheWriteTokens: 100_000, OutputTokens: 200_000}
	// 400k plain at 3, 500k cached at 0.3, 100k written at 3.75, 200k out at 15.
	if got, want := p.For("claude").Prices.Cost(u), 1.2+0.15+0.375+3.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("claude cost = %v, want %v", got, want)
	}
	// Without cache prices, cached and written tokens cost the input price.
	if got, want := p.For("seeing").Prices.Cost(u), 1.0+0.4; math.Abs(got-want) > 1e-9 {
		t.Errorf("seeing cost = %v, want %v", got, want)
	}
	if got := p.For("texty").Prices.Cost(u); got != 0 {
		t.Errorf("an unpriced model costs %v", got)
	}
	v := p.PriceVersion()
	if len(v) != 12 || DefaultProfiles().PriceVersion() != "" {
		t.Errorf("price version %q; default %q", v, DefaultProfiles().PriceVersion())
	}
	for _, bad := range []struct{ body, want string }{
		{`{"models": {"m": {"context_window": 1, "input": ["image"]}}}`, `must hold "text"`},
		{`{"models": {"m": {"context_window": 1, "input": ["text", "audio"]}}}`, `"audio" is not one of`},
		{`{"models": {"m": {"context_window": 1, "input": ["text", "text"]}}}`, `given twice`},
		{`{"models": {"m": {"context_window": 1, "prices": {"input": -1, "output": 1}}}}`, `prices.input -1`},
		{`{"models": {"m": {"context_window": 1, "prices": {"input": 1, "output": 1, "extra": 2}}}}`, `unknown field`},
	} {
		_, err := parseProfiles([]byte(bad.body))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want one saying %q", bad.body, err, bad.want)
		}
	}
	if names := p.FileNames(); !slices.Equal(names, []string{"claude", "texty", "seeing", "gpt-4o", "eu-4o", "eu-35"}) {
		t.Errorf("FileNames() = %v", names)
	}
}

// TestProfileEmbeddings: the models file's embeddings entry names the
// embedding model; a bad one is refused, saying why.
func TestProfileEmbeddings(t *testing.T) {
	p, err := parseProfiles([]byte(`{"models": {}, "embeddings": {"model": "fake-embed", "dimensions": 32}}`))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := p.Embeddings(); !ok || e.Model != "fake-embed" || e.Dimensions != 32 {
		t.Fatalf("embeddings: %+v %v", e, ok)
	}
	if _, ok := DefaultProfiles().Embeddings(); ok {
		t.Fatal("the built-in profiles name an embedding model")
	}
	for _, bad := range []string{
		`{"models": {}, "embeddings": {}}`,
		`{"models": {}, "embeddings": {"model": "m", "api_key_env": "K"}}`,
		`{"models": {}, "embeddings": {"model": "m", "base_url": "ftp://x", "api_key_env": "K"}}`,
		`{"models": {}, "embeddings": {"model": "m", "dimensions": -1}}`,
		`{"models": {}, "embeddings": {"model": "m", "key": "sk-secret"}}`,
	} {
		if _, err := parseProfiles([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
