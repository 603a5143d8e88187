package llm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
)

var _ Model = (*Router)(nil)

// Providers a model can be routed to: the APIs agentd has an adapter for.
const (
	// ProviderOpenAI is any OpenAI-compatible Chat Completions endpoint.
	ProviderOpenAI = "openai"
	// ProviderAnthropic is Anthropic's Messages API.
	ProviderAnthropic = "anthropic"
)

// Providers lists the providers a Route may name.
func Providers() []string { return []string{ProviderOpenAI, ProviderAnthropic} }

// Route says where a model is served. Its zero value is the default
// endpoint, under the model's own name.
type Route struct {
	// Provider is the API the endpoint speaks (ProviderOpenAI,
	// ProviderAnthropic); "" is the default endpoint, which only Model may
	// then change.
	Provider string
	// BaseURL is the endpoint's API root; "" is the provider's own (for
	// openai, https://api.openai.com/v1; for anthropic,
	// https://api.anthropic.com).
	BaseURL string
	// APIKeyEnv names the environment variable that holds the endpoint's
	// API key (the key itself is never configured with the route); "" sends
	// no key.
	APIKeyEnv string
	// Model is the name the endpoint knows the model by; "" is the name
	// requests give.
	Model string
}

// Router is a Model that sends each request to the endpoint its model is
// routed to, under the endpoint's name for it, and every other request to
// the default endpoint.
type Router struct {
	def    *OpenAI
	routes map[string]route // by the model name of requests
	all    []adapter        // every adapter, the default's first
}

// adapter is what the router holds of an endpoint's adapter.
type adapter interface {
	Model
	CloseIdleConnections()
}

// route is a model's endpoint and its name there ("" for the same name).
type route struct {
	model    Model
	upstream string
}

// NewRouter returns a router for routes (by model name, as the models file
// gives them), whose default endpoint is def, read as NewOpenAI reads it (so
// with OPENAI_API_KEY and OPENAI_BASE_URL from the environment when def
// leaves them empty). A routed endpoint takes nothing from the default's
// configuration but its IdleTimeout and HTTPClient: its key is the value of
// its APIKeyEnv, read with getenv, and routes to the same endpoint with the
// same key share one adapter (and its connections). A route to anthropic
// gets an Anthropic adapter (NewAnthropic), with the same IdleTimeout and
// HTTPClient. A route to a provider agentd does not know, a BaseURL that
// is not an http(s) URL, or a key variable that getenv finds empty, is an
// error that names the model; all of them are reported at once. A nil
// getenv is os.Getenv.
func NewRouter(routes map[string]Route, def OpenAIConfig, getenv func(string) string) (*Router, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	r := &Router{def: NewOpenAI(def), routes: make(map[string]route, len(routes))}
	r.all = append(r.all, r.def)
	shared := make(map[any]adapter) // by configuration: OpenAIConfig or AnthropicConfig
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(routes)) {
		rt := routes[name]
		if rt.Provider == "" {
			if rt.BaseURL != "" || rt.APIKeyEnv != "" {
				errs = append(errs, fmt.Errorf("model %q: base_url and api_key_env need a provider (%s)", name, strings.Join(Providers(), ", ")))
				continue
			}
			r.routes[name] = route{model: r.def, upstream: rt.Model}
			continue
		}
		cfg, err := endpoint(rt, def, getenv)
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", name, err))
			continue
		}
		var key any = cfg
		if rt.Provider == ProviderAnthropic {
			key = AnthropicConfig{BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, IdleTimeout: cfg.IdleTimeout, HTTPClient: cfg.HTTPClient}
		}
		m := shared[key]
		if m == nil {
			switch k := key.(type) {
			case AnthropicConfig:
				m = NewAnthropic(k)
			case OpenAIConfig:
				m = newOpenAI(k, false)
			}
			shared[key] = m
			r.all = append(r.all, m)
		}
		r.routes[name] = route{model: m, upstream: rt.Model}
	}
	if len(errs) > 0 {
		r.CloseIdleConnections()
		return nil, fmt.Errorf("model routes: %w", errors.Join(errs...))
	}
	return r, nil
}

// endpoint is the configuration of the endpoint rt names.
// An anthropic endpoint's configuration is read into the same fields
// (without PromptCacheKey).
func endpoint(rt Route, def OpenAIConfig, getenv func(string) string) (OpenAIConfig, error) {
	if rt.Provider != ProviderOpenAI && rt.Provider != ProviderAnthropic {
		return OpenAIConfig{}, fmt.Errorf("provider %q is not one agentd knows (%s)", rt.Provider, strings.Join(Providers(), ", "))
	}
	cfg := OpenAIConfig{BaseURL: rt.BaseURL, IdleTimeout: def.IdleTimeout, HTTPClient: def.HTTPClient}
	if rt.BaseURL != "" {
		u, err := url.Parse(rt.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return OpenAIConfig{}, fmt.Errorf("base_url %q is not an http or https URL", rt.BaseURL)
		}
	}
	if rt.APIKeyEnv != "" {
		if cfg.APIKey = getenv(rt.APIKeyEnv); cfg.APIKey == "" {
			return OpenAIConfig{}, fmt.Errorf("api_key_env names %s, which is not set", rt.APIKeyEnv)
		}
	}
	// prompt_cache_key goes to OpenAI's own API only; another endpoint may
	// refuse a field it does not know.
	cfg.PromptCacheKey = rt.Provider == ProviderOpenAI && OfficialOpenAI(rt.BaseURL)
	return cfg, nil
}

// OfficialOpenAI reports whether baseURL is OpenAI's own API ("" is: it is
// the SDK's default), which takes fields that compatible servers may refuse
// (prompt_cache_key).
func OfficialOpenAI(baseURL string) bool {
	if baseURL == "" {
		return true
	}
	u, err := url.Parse(baseURL)
	return err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
}

// Stream implements Model: it sends req to the endpoint req.Model is routed
// to, under its name there, and returns what that endpoint's adapter
// returns.
func (r *Router) Stream(ctx context.Context, req Request, onDelta func(text string)) (Response, error) {
	rt, ok := r.routes[req.Model]
	if !ok {
		return r.def.Stream(ctx, req, onDelta)
	}
	if rt.upstream != "" {
		req.Model = rt.upstream
	}
	return rt.model.Stream(ctx, req, onDelta)
}

// CloseIdleConnections closes the idle connections of every endpoint's
// adapter (for a shutdown).
func (r *Router) CloseIdleConnections() {
	for _, m := range r.all {
		m.CloseIdleConnections()
	}
}
