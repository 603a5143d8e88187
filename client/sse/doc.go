// Package sse reads a stream of Server-Sent Events as the WHATWG HTML
// standard defines them ("event stream interpretation"), and hands back each
// event's raw fields: its own id (if it had one), its type, its data and the
// stream's retry hint. It is the one reader of agentd's event streams: the
// Go SDK's Events iterator is built on it, and so are the tools and tests
// that compare what a client received with the stored events byte for byte.
//
// It knows nothing of agentd's event types or envelopes (the client package
// decodes those) and keeps no connection: reconnecting with Last-Event-ID is
// the caller's business.
//
// Package sse imports only the standard library.
package sse
