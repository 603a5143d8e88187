// Package aisdk speaks the AI SDK's UI message stream protocol (the `ai` npm
// package, version 7): it turns a run's stored events into the chunks that
// the AI SDK's useChat and DefaultChatTransport read. (The chat requests
// they send are read by api, which owns everything about HTTP requests.)
//
// Every chunk is derived from committed events, the run's id and which of
// the run's answers the stream is (its turn: the input it answers), so a
// replay of a run gives the same bytes each time, on any instance. Each
// event's data is read through the domain's one decoder
// (agentd.Envelope.Payload).
//
// It imports only the domain package (github.com/agentd/agentd) of
// agentd's.
package aisdk
