package compact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentd/agentd/internal/llm"
)

// Profile is what agentd knows of a model: its limits, and where it is
// served.
type Profile struct {
	ContextWindow   int     `json:"context_window"`       // tokens; 0: no known limit (never compacted)
	MaxOutputTokens int     `json:"max_output_tokens"`    // tokens reserved for the answer
	CompactAt       float64 `json:"compact_at,omitempty"` // fraction of the window past which older turns are compacted; 0: DefaultCompactAt
	// Input is what the model takes in a user's message beyond text
	// (InputText, InputImage, InputFile); nil: text alone, unless the
	// provider is known to take more (InputKinds).
	Input []string `json:"input,omitempty"`
	// Prices are what the model costs, per million tokens; nil: unpriced
	// (its calls cost 0 in the ledger).
	Prices *Prices `json:"prices,omitempty"`
	// Route is the endpoint that serves the model, from the models file's
	// provider, base_url, api_key_env and model; its zero value is the
	// default endpoint (OPENAI_API_KEY and OPENAI_BASE_URL, or the
	// built-in fake).
	Route llm.Route `json:"-"`
	// multimodal: without an Input list, the model takes images and files
	// (Accepts).
	multimodal bool
}

// DefaultCompactAt is the fraction of the room left for the prompt past which
// older turns are compacted, when a profile does not say: late enough that
// short conversations are never touched, early enough that the summary
// request itself, and the turn that follows it, still fit.
const DefaultCompactAt = 0.8

// Fallback is the profile of a model agentd knows nothing of: a window of
// 128000 tokens, 4096 for the answer. 128000 is the smallest window among
// current mainstream models (gpt-4o, gpt-4-turbo, and most compatible
// servers' large models), so a conversation with an unknown model is
// compacted early rather than never: compacting too soon costs a summary,
// compacting too late costs the run.
var Fallback = Profile{ContextWindow: 128000, MaxOutputTokens: 4096}

// Threshold is the prompt size, in tokens, past which compaction starts:
// (ContextWindow - MaxOutputTokens) * CompactAt (DefaultCompactAt when 0),
// rounded down; 0 when the window is unknown (ContextWindow 0).
func (p Profile) Threshold() int {
	if p.ContextWindow <= 0 {
		return 0
	}
	at := p.CompactAt
	if at == 0 {
		at = DefaultCompactAt
	}
	return int(float64(max(p.ContextWindow-p.MaxOutputTokens, 0)) * at)
}

// EstimateTokens estimates the prompt tokens of messages whose contents (as
// the built-in fake counts them: texts, tool call names and arguments) total
// bytes bytes. It is the fake's own rule, prompt_tokens = P/4 + 1 (see
// internal/llm/fakellm/doc.go), so that against the fake the estimate is
// exact; against a real model it is the usual rough four bytes a token.
func EstimateTokens(bytes int) int { return bytes/4 + 1 }

// builtin holds the documented limits of common OpenAI models: the context
// window, and the most output tokens a request may ask for.
var builtin = map[string]Profile{
	"gpt-4o":        {ContextWindow: 128000, MaxOutputTokens: 16384, multimodal: true},
	"gpt-4o-mini":   {ContextWindow: 128000, MaxOutputTokens: 16384, multimodal: true},
	"gpt-4.1":       {ContextWindow: 1047576, MaxOutputTokens: 32768, multimodal: true},
	"gpt-4.1-mini":  {ContextWindow: 1047576, MaxOutputTokens: 32768, multimodal: true},
	"gpt-4.1-nano":  {ContextWindow: 1047576, MaxOutputTokens: 32768, multimodal: true},
	"o1":            {ContextWindow: 200000, MaxOutputTokens: 100000, multimodal: true},
	"o1-mini":       {ContextWindow: 128000, MaxOutputTokens: 65536}, // else o1-mini would read as o1
	"o3":            {ContextWindow: 200000, MaxOutputTokens: 100000, multimodal: true},
	"o3-mini":       {ContextWindow: 200000, MaxOutputTokens: 100000},
	"o4-mini":       {ContextWindow: 200000, MaxOutputTokens: 100000, multimodal: true},
	"gpt-5":         {ContextWindow: 400000, MaxOutputTokens: 128000, multimodal: true},
	"gpt-5-mini":    {ContextWindow: 400000, MaxOutputTokens: 128000, multimodal: true},
	"gpt-5-nano":    {ContextWindow: 400000, MaxOutputTokens: 128000, multimodal: true},
	"gpt-4-turbo":   {ContextWindow: 128000, MaxOutputTokens: 4096, multimodal: true},
	"gpt-3.5-turbo": {ContextWindow: 16385, MaxOutputTokens: 4096},
}

// Profiles maps model names to profiles. A nil *Profiles holds the built-in
// profiles only. It is not changed after it is made, so it is safe for
// concurrent use.
type Profiles struct {
	byName map[string]Profile
	file   []string // the names the models file gave, in its order
	// embeddings is the file's embeddings entry; nil: none.
	embeddings *Embeddings
}

// DefaultProfiles returns the built-in profiles: the documented limits of
// common OpenAI models (gpt-4o, gpt-4o-mini, gpt-4.1, gpt-4.1-mini,
// gpt-4.1-nano, o1, o1-mini, o3, o3-mini, o4-mini, gpt-5, gpt-5-mini,
// gpt-5-nano, gpt-4-turbo, gpt-3.5-turbo), and the fake model rule (see For).
func DefaultProfiles() *Profiles {
	return &Profiles{byName: maps.Clone(builtin)}
}

// modelsFile is the shape of a models file.
type modelsFile struct {
	Models     json.RawMessage `json:"models"`
	Embeddings *Embeddings     `json:"embeddings"`
}

// Embeddings is the models file's "embeddings" entry: the model that
// embeds memory items and queries for search (internal/memory), at an
// OpenAI-compatible /embeddings endpoint.
//
//	"embeddings": {"model": NAME, "base_url": U, "api_key_env": E, "dimensions": N}
//
// model is required; base_url absent is the default endpoint (the
// configured OpenAI-compatible one, or the built-in fake, whose embeddings
// are deterministic); api_key_env names the variable holding the key of
// base_url's endpoint (absent: the default endpoint's key); dimensions,
// when set, asks the endpoint for vectors of that length.
type Embeddings struct {
	Model      string `json:"model"`
	BaseURL    string `json:"base_url,omitempty"`
	APIKeyEnv  string `json:"api_key_env,omitempty"`
	Dimensions int    `json:"dimensions,omitempty"`
}

// check says what is wrong with e.
func (e *Embeddings) check() error {
	switch {
	case e.Model == "":
		return errors.New(`embeddings: no "model"`)
	case e.APIKeyEnv != "" && !envName.MatchString(e.APIKeyEnv):
		return fmt.Errorf("embeddings: api_key_env %q is not an environment variable's name", e.APIKeyEnv)
	case e.APIKeyEnv != "" && e.BaseURL == "":
		return errors.New("embeddings: api_key_env needs a base_url")
	case e.Dimensions < 0 || e.Dimensions > 16384:
		return fmt.Errorf("embeddings: dimensions %d is not in [0, 16384]", e.Dimensions)
	}
	if e.BaseURL != "" {
		if u, err := url.Parse(e.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("embeddings: base_url %q is not an http(s) URL", e.BaseURL)
		}
	}
	return nil
}

// Embeddings returns the models file's embeddings entry; false: the file
// names no embedding model (memory is searched by full text alone).
func (p *Profiles) Embeddings() (Embeddings, bool) {
	if p == nil || p.embeddings == nil {
		return Embeddings{}, false
	}
	return *p.embeddings, true
}

// fileProfile is one entry of a models file; pointers tell an absent field
// from a zero one.
type fileProfile struct {
	ContextWindow   *int     `json:"context_window"`
	MaxOutputTokens *int     `json:"max_output_tokens"`
	CompactAt       *float64 `json:"compact_at"`
	Provider        *string  `json:"provider"`
	BaseURL         *string  `json:"base_url"`
	APIKeyEnv       *string  `json:"api_key_env"`
	Model           *string  `json:"model"`
	Input           []string `json:"input"`
	Prices          *Prices  `json:"prices"`
}

// LoadProfiles reads the models file at path,
//
//	{"models": {"NAME": {"context_window": N, "max_output_tokens": M, "compact_at": F,
//	  "provider": P, "base_url": U, "api_key_env": E, "model": UPSTREAM}}}
//
// over the defaults: a file entry replaces a built-in one of the same name
// (all of it: a field the entry leaves out is zero, not the built-in value).
// It reads strictly: unknown fields, a name given twice, an empty name, a
// missing "models" or context_window, and bad values are errors. The values
// must be: context_window >= 0 (0: no known limit); max_output_tokens >= 0
// (absent: 0) and, when the window is set, less than it; compact_at in
// (0, 1), or absent for DefaultCompactAt.
//
// The other fields route the model (see Routes; llm.NewRouter checks them
// against the providers agentd knows, and reads the keys): provider names
// the API its endpoint speaks (one of llm.Providers(): "openai", any
// OpenAI-compatible Chat Completions endpoint; "anthropic", Anthropic's
// Messages API), base_url the endpoint's API root (absent: the
// provider's own), api_key_env the environment variable that holds its key
// (absent: no key), model the endpoint's name for it (absent: NAME). The
// file never holds a key: api_key_env must be a variable's name (letters,
// digits and _, not starting with a digit). base_url and api_key_env need
// a provider; model alone renames the model on the default endpoint. Each
// given must be a non-empty string.
func LoadProfiles(path string) (*Profiles, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("models file: %w", err)
	}
	p, err := parseProfiles(b)
	if err != nil {
		return nil, fmt.Errorf("models file %s: %w", path, err)
	}
	return p, nil
}

func parseProfiles(b []byte) (*Profiles, error) {
	var f modelsFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the top-level object")
	}
	if len(f.Models) == 0 || string(f.Models) == "null" {
		return nil, errors.New(`no "models" object`)
	}

	// The models object is walked token by token, as decoding it into a
	// map would keep the last of two entries of the same name silently.
	p := DefaultProfiles()
	if f.Embeddings != nil {
		if err := f.Embeddings.check(); err != nil {
			return nil, err
		}
		p.embeddings = f.Embeddings
	}
	seen := make(map[string]bool)
	dec = json.NewDecoder(bytes.NewReader(f.Models))
	dec.DisallowUnknownFields()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New(`"models" is not an object`)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := tok.(string) // keys of a valid object are strings
		if name == "" {
			return nil, errors.New("a model with an empty name")
		}
		if seen[name] {
			return nil, fmt.Errorf("model %q given twice", name)
		}
		seen[name] = true
		var e *fileProfile
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("model %q: %w", name, err)
		}
		prof, err := e.profile()
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", name, err)
		}
		// Without an input list, an entry takes what the model it names
		// is known to take (a built-in profile, the fake, by its name or
		// its upstream name's).
		prof.multimodal = prof.multimodal || p.For(name).multimodal ||
			(prof.Route.Model != "" && p.For(prof.Route.Model).multimodal)
		p.byName[name] = prof
		p.file = append(p.file, name)
	}
	return p, nil
}

// profile checks e and returns it as a Profile.
func (e *fileProfile) profile() (Profile, error) {
	if e == nil {
		return Profile{}, errors.New("null profile")
	}
	if e.ContextWindow == nil {
		return Profile{}, errors.New("no context_window (0 for no known limit)")
	}
	p := Profile{ContextWindow: *e.ContextWindow}
	if e.MaxOutputTokens != nil {
		p.MaxOutputTokens = *e.MaxOutputTokens
	}
	switch {
	case p.ContextWindow < 0:
		return Profile{}, fmt.Errorf("context_window %d is negative", p.ContextWindow)
	case p.MaxOutputTokens < 0:
		return Profile{}, fmt.Errorf("max_output_tokens %d is negative", p.MaxOutputTokens)
	case p.ContextWindow > 0 && p.MaxOutputTokens >= p.ContextWindow:
		return Profile{}, fmt.Errorf("max_output_tokens %d is not less than context_window %d",
			p.MaxOutputTokens, p.ContextWindow)
	}
	if e.CompactAt != nil {
		// Written so that NaN fails too.
		if !(*e.CompactAt > 0 && *e.CompactAt < 1) {
			return Profile{}, fmt.Errorf("compact_at %v is not between 0 and 1 (exclusive)", *e.CompactAt)
		}
		p.CompactAt = *e.CompactAt
	}
	r, err := e.route()
	if err != nil {
		return Profile{}, err
	}
	p.Route = r
	p.multimodal = r.Provider == llm.ProviderAnthropic
	if p.Input, err = inputKinds(e.Input); err != nil {
		return Profile{}, err
	}
	if e.Prices != nil {
		if err := e.Prices.check(); err != nil {
			return Profile{}, err
		}
		p.Prices = e.Prices
	}
	return p, nil
}

// envName is the name of an environment variable, as POSIX shells take it.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// route checks e's provider fields and returns them as a route.
func (e *fileProfile) route() (llm.Route, error) {
	var r llm.Route
	for _, f := range []struct {
		name     string
		from, to *string
	}{{"provider", e.Provider, &r.Provider}, {"base_url", e.BaseURL, &r.BaseURL},
		{"api_key_env", e.APIKeyEnv, &r.APIKeyEnv}, {"model", e.Model, &r.Model}} {
		if f.from == nil {
			continue
		}
		if *f.from == "" {
			return llm.Route{}, fmt.Errorf("%s is empty (leave it out for the default)", f.name)
		}
		*f.to = *f.from
	}
	if r.APIKeyEnv != "" && !envName.MatchString(r.APIKeyEnv) {
		// Its value is not repeated: it may be a key put there by mistake.
		return llm.Route{}, errors.New("api_key_env is not the name of an environment variable (letters, digits and _, " +
			"not starting with a digit): the file names the variable that holds the key, never the key")
	}
	if r.Provider == "" && (r.BaseURL != "" || r.APIKeyEnv != "") {
		return llm.Route{}, fmt.Errorf("base_url and api_key_env need a provider (%s)", strings.Join(llm.Providers(), ", "))
	}
	return r, nil
}

// Routes returns the routes of the models the file routes (those with a
// provider or an upstream model name), by name, for llm.NewRouter; every
// other model goes to the default endpoint. nil for none.
func (p *Profiles) Routes() map[string]llm.Route {
	if p == nil {
		return nil
	}
	var out map[string]llm.Route
	for name, prof := range p.byName {
		if prof.Route == (llm.Route{}) {
			continue
		}
		if out == nil {
			out = make(map[string]llm.Route)
		}
		out[name] = prof.Route
	}
	return out
}

// fakeOutputTokens is what a fake-<N>k profile reserves for the answer: the
// fake's answers are short.
const fakeOutputTokens = 256

// maxFakeK is the largest N of a fake-<N>k name, as internal/llm/fakellm
// reads it.
const maxFakeK = 1 << 20

// For returns the profile of model, looked up in this order:
//
//  1. an exact name (a file entry, or a built-in one);
//  2. the fake model: "fake" has no limit (ContextWindow 0); "fake-<N>k", N
//     a decimal integer from 1 to 1048576 without leading zeros, has
//     ContextWindow N*1024 and MaxOutputTokens 256, the window the fake
//     enforces (internal/llm/fakellm/doc.go). Other "fake-..." names
//     ("fake-0k", "fake-xk") are not fake windows and go on to 3;
//  3. a dated or suffixed variant of a known name: the longest known name
//     that, followed by "-", is a prefix of model (gpt-4o-2024-08-06 and
//     gpt-4o-audio-preview → gpt-4o, gpt-4o-mini-2024-07-18 → gpt-4o-mini);
//  4. Fallback.
//
// The fake comes before the variants so that a file entry "fake" cannot make
// "fake-4k" forget its window.
func (p *Profiles) For(model string) Profile {
	names := builtin
	if p != nil {
		names = p.byName
	}
	if prof, ok := names[model]; ok {
		return prof
	}
	if model == "fake" {
		return Profile{multimodal: true}
	}
	if k, ok := fakeWindowK(model); ok {
		return Profile{ContextWindow: k * 1024, MaxOutputTokens: fakeOutputTokens, multimodal: true}
	}
	best := "" // no name is empty
	for name := range names {
		if len(name) > len(best) && strings.HasPrefix(model, name+"-") {
			best = name
		}
	}
	if best != "" {
		return names[best]
	}
	return Fallback
}

// fakeWindowK returns N of a "fake-<N>k" model name.
func fakeWindowK(model string) (int, bool) {
	n, ok := strings.CutPrefix(model, "fake-")
	if !ok {
		return 0, false
	}
	n, ok = strings.CutSuffix(n, "k")
	if !ok || n == "" || n[0] < '1' || n[0] > '9' || len(n) > 7 {
		return 0, false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	k, err := strconv.Atoi(n)
	if err != nil || k > maxFakeK {
		return 0, false
	}
	return k, true
}
