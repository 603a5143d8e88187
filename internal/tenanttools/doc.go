// Package tenanttools makes the tools of a tenant's runs: the operator's
// registry, with the webhook tools and the tools of the remote MCP servers
// the tenant declared through the API beside it (mcp.go). A tenant's tools
// reach the registry of its own runs only; their headers are opened from
// their sealed form (internal/secrets) when the registry is made, and
// their URLs are called through a client held to the operator's egress
// rule (tools.GuardedClient). Catalog implements the composer's Tools
// port (compose.Tools), through which every run's tools are checked.
//
// It imports the domain, internal/tools, internal/mcptools and
// internal/secrets.
package tenanttools
