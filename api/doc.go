// Package api is agentd's HTTP transport: the chi router, its middleware
// (request ids, panic recovery, access logs, request metrics, tenants), the
// handlers of the run, conversation and tool endpoints, their JSON request and
// response bodies, the one mapping of errors to application/problem+json
// (RFC 9457) bodies, and openapi.yaml, which describes all of it.
//
// It holds no business rules beyond validating what clients send, and owns
// everything about HTTP: it parses and canonicalises ids and stream
// positions, checks who asks, and writes every problem body. It reaches the
// rest through three ports: Runs for every command on a run (run.Service),
// Store for reads and idempotency records (*persist.Store), and Events for
// event streams (*stream.Hub).
//
// It may import internal/persist (row types and sentinel errors),
// internal/stream (its errors), internal/tools, internal/vocab,
// internal/clean and internal/metrics; it never imports pgx or the engine.
package api
