// Package tools holds the Tool port, the registry of tools a server offers,
// argument validation against each tool's JSON Schema, the built-in tools
// (calculator, clock, http_request), webhook tools declared in a JSON file, and
// the attempt policy that says, from a tool's effect and a failure's kind,
// whether a failed attempt is retried, failed, or left with an unknown outcome.
// A tool that can find out what became of an unknown call (a webhook with a
// reconcile_url) implements Reconciler.
//
// It imports the domain (agentd: a tool's effect and error kinds, an
// artifact) and nothing else of agentd's: the ledger of calls and attempts
// is kept by the engine through internal/persist.
package tools
