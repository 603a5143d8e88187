// Package api is agentd's HTTP transport: the chi router, its middleware
// (request ids, panic recovery, access logs, request metrics, tenants), the
// handlers of the run, conversation and tool endpoints, their JSON request and
// response bodies, the one mapping of errors to application/problem+json
// (RFC 9457) bodies, and openapi.yaml, which describes all of it.
//
// It holds no business rules beyond validating what clients send: runs are
// created, read, cancelled and resumed through the small Store interface
// (implemented by *persist.Store), and the engine picks them up from there.
// The event stream (GET /runs/{id}/events) and streamed run creation
// ("stream": true) are hooks, Config.Events and Config.StreamFunc, filled in
// by the stream package.
//
// It may import internal/persist (row types and sentinel errors) and
// internal/tools; it never imports pgx.
package api
