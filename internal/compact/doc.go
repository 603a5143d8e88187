// Package compact keeps long conversations within their model's context
// window: model profiles (with where each model is served, for the model
// router), the token budget of a request, and the compaction that replaces
// older turns, in what the model is sent, by a summary.
//
// It imports the domain package (agentd) and llm, nothing else of agentd's.
package compact
