// Package llm is agentd's port to a language model: the Model interface the
// engine calls, a provider-neutral message shape, error classification
// (retryable or final), and an adapter over the openai-go SDK that speaks to any
// OpenAI-compatible Chat Completions endpoint. The fake server used by tests,
// benchmarks and offline users lives in the fakellm subpackage.
//
// It imports nothing of agentd's.
package llm
