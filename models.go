package agentd

// ObjectModel is the object name of a ModelView.
const ObjectModel = "model"

// ModelView is a model this server offers, as GET /models shows it: the
// name runs ask for (ID), where it is served, its limits, what it takes in
// a user's message, and its prices per million tokens (nil: unpriced).
type ModelView struct {
	ID     string `json:"id"`
	Object string `json:"object"` // ObjectModel
	// Provider is the API that serves it ("openai": any OpenAI-compatible
	// endpoint; "anthropic"); Upstream the provider's name for it.
	Provider        string      `json:"provider"`
	Upstream        string      `json:"upstream"`
	ContextWindow   int         `json:"context_window"` // 0: no known limit
	MaxOutputTokens int         `json:"max_output_tokens"`
	Input           []string    `json:"input"`
	Prices          *ModelPrice `json:"prices"`
	// Default says that runs that name no model get this one.
	Default bool `json:"default"`
}

// ModelPrice is what a model costs per million tokens: input not read
// from the cache, input read from it, input written to it, and output.
type ModelPrice struct {
	Input       float64 `json:"input"`
	CachedInput float64 `json:"cached_input"`
	CacheWrite  float64 `json:"cache_write"`
	Output      float64 `json:"output"`
}
