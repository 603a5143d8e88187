// Package mcptools brings the tools of Model Context Protocol servers into
// agentd's tool registry, through the official Go SDK: each server's tools
// are listed when it connects and when it says they changed, and offered as
// SERVER__TOOL; a call goes through the same ledger as any tool's, with the
// idempotency key in the request's _meta.
//
// It imports the domain (agentd) and internal/tools, nothing else of
// agentd's.
package mcptools
