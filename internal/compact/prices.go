package compact

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/agentd/agentd/internal/llm"
)

// What a model may take in a user's message (Profile.Input).
const (
	InputText  = "text"
	InputImage = "image"
	InputFile  = "file"
)

// inputKinds checks a profile's input list: each of InputText, InputImage
// and InputFile at most once, text among them.
func inputKinds(in []string) ([]string, error) {
	if in == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	for _, k := range in {
		switch {
		case k != InputText && k != InputImage && k != InputFile:
			return nil, fmt.Errorf("input %q is not one of text, image, file", k)
		case seen[k]:
			return nil, fmt.Errorf("input %q given twice", k)
		}
		seen[k] = true
	}
	if !seen[InputText] {
		return nil, fmt.Errorf(`input must hold "text"`)
	}
	return slices.Clone(in), nil
}

// Accepts reports whether the model of profile p takes input of kind k in
// a user's message. Text always; images and files when its input list says
// so, or, without one, for a model served by Anthropic, the fake, or one
// of OpenAI's multimodal models among the built-in profiles (a models
// file's entry of such a name, or whose upstream model is one, included).
func (p Profile) Accepts(k string) bool {
	if k == InputText {
		return true
	}
	if p.Input != nil {
		return slices.Contains(p.Input, k)
	}
	return p.multimodal
}

// Provider is the provider that serves the model of p: its route's, or,
// for the default endpoint, llm.ProviderOpenAI.
func (p Profile) Provider() string {
	if p.Route.Provider == "" {
		return llm.ProviderOpenAI
	}
	return p.Route.Provider
}

// Prices are a model's prices, per million tokens, in the operator's
// currency. CachedInput is the price of input tokens read from the
// provider's cache, CacheWrite of those written to it; a nil one is
// Input's.
type Prices struct {
	Input       float64  `json:"input"`
	CachedInput *float64 `json:"cached_input,omitempty"`
	CacheWrite  *float64 `json:"cache_write,omitempty"`
	Output      float64  `json:"output"`
}

func (p *Prices) check() error {
	for _, f := range []struct {
		name string
		v    *float64
	}{{"input", &p.Input}, {"cached_input", p.CachedInput}, {"cache_write", p.CacheWrite}, {"output", &p.Output}} {
		if f.v != nil && (*f.v < 0 || math.IsNaN(*f.v) || math.IsInf(*f.v, 0)) {
			return fmt.Errorf("prices.%s %v is not a price (a number not below 0)", f.name, *f.v)
		}
	}
	return nil
}

// Cost is what usage u costs at prices p: input not read from the cache
// nor written to it at Input, cached reads at CachedInput, cache writes at
// CacheWrite, output (reasoning included) at Output. A nil p costs 0.
func (p *Prices) Cost(u llm.Usage) float64 {
	if p == nil {
		return 0
	}
	plain := max(u.InputTokens-u.CachedInputTokens-u.CacheWriteTokens, 0)
	cached, write := p.CacheRates()
	return (float64(plain)*p.Input + float64(u.CachedInputTokens)*cached +
		float64(u.CacheWriteTokens)*write + float64(u.OutputTokens)*p.Output) / 1e6
}

// CacheRates are the prices of input read from the cache and written to
// it: CachedInput and CacheWrite, each Input's when nil.
func (p *Prices) CacheRates() (cached, write float64) {
	cached, write = p.Input, p.Input
	if p.CachedInput != nil {
		cached = *p.CachedInput
	}
	if p.CacheWrite != nil {
		write = *p.CacheWrite
	}
	return cached, write
}

// PriceVersion names the price table of p: the first 12 hex digits of the
// SHA-256 of every priced model's prices, by name; "" when no model is
// priced. A ledger row keeps it, so that a cost can be told from one
// computed at other prices.
func (p *Profiles) PriceVersion() string {
	if p == nil {
		return ""
	}
	priced := map[string]*Prices{}
	for name, prof := range p.byName {
		if prof.Prices != nil {
			priced[name] = prof.Prices
		}
	}
	if len(priced) == 0 {
		return ""
	}
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(priced)) {
		b, _ := json.Marshal(priced[name]) // fields of float64s only
		fmt.Fprintf(h, "%q:%s\n", name, b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Known reports whether p has a profile of model by its exact name (the
// models file's, or a built-in one).
func (p *Profiles) Known(model string) bool {
	names := builtin
	if p != nil {
		names = p.byName
	}
	_, ok := names[model]
	return ok
}

// FileNames returns the names of the models the models file gave, in its
// order; nil for the built-in profiles alone.
func (p *Profiles) FileNames() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.file)
}
