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
// event streams (*stream.Hub), all of them in the domain's terms; a new
// run's spec is built by internal/runspec, the one builder every door
// shares.
//
// It imports the domain (agentd), internal/runspec, internal/stream (its
// errors and encoder port), internal/aisdk (the AI SDK's stream encoder),
// internal/auth, internal/tools, internal/telemetry and internal/metrics;
// it never imports internal/persist, pgx or the engine.
package api
