// Package runspec turns what a client asked of a new run into the run's
// spec (agentd.RunSpec), once, for every door that starts runs: POST /runs,
// the AI SDK's chat endpoint, and the surfaces to come. A transport decodes
// its own wire format into a Request (ids parsed, absent fields nil); the
// Builder checks every field, applies the server's defaults and ceilings
// (model, step budget, timeouts, tools, client tools, loop limits,
// compaction threshold, sampling, metadata) and refuses bad input with a *FieldError
// that names the field, or an *UnknownToolError.
//
// It imports the domain (agentd), internal/tools (the server's tools, tool
// names and schemas) and internal/clean (what can be stored), nothing else
// of agentd's; it knows nothing of HTTP.
package runspec
