// Package llm is agentd's port to a language model, in agentd's own terms:
// the Model interface the engine calls; a provider-neutral conversation
// (messages of parts: text, image, file, tool call, tool result), finish
// reasons and usage; the one classifier of failures that every adapter
// uses (retryable or final, auth, context overflow, rate limited with its
// Retry-After; what the provider said, capped, with the key scrubbed); an
// adapter over the openai-go SDK that speaks to any OpenAI-compatible Chat
// Completions endpoint (OpenAI); an adapter over the official
// anthropic-sdk-go that speaks Anthropic's Messages API (Anthropic), with
// prompt caching at the breakpoints it places and extended thinking, whose
// blocks come back as Response.Reasoning and go back as PartReasoning
// parts; and a Router that sends each model to the endpoint the models
// file routes it to, and the rest to the default one. The fake servers used
// by tests, benchmarks and offline users live in the fakellm (Chat
// Completions) and fakeanthropic (Messages) subpackages.
//
// It imports nothing of agentd's.
package llm
