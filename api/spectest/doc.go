// Package spectest checks, in tests, that run events match what openapi.yaml
// says of them: each stored envelope against the EventEnvelope schema, and its
// data against the schema that EventEnvelope's x-event-types names for its
// type. Tests that drive runs call CheckEvents on the runs' stored events (or
// CheckEvent on what a client received), so that the events the engine writes
// and the published description cannot drift apart unnoticed.
//
// CheckResponse does the same for HTTP answers: it finds the operation of a
// request's method and path, the response of its status (or default), and
// validates the body against that response's schema for its Content-Type.
// The api package's test helpers call it on every answer they read.
//
// The check is stricter than the letter of the spec in one way: an object
// schema that lists its properties is taken as closed, so a key the spec does
// not describe is reported as drift too.
//
// It is for tests only. It imports api (for the embedded spec) and the
// domain (agentd, for the event row type), nothing else of agentd's.
package spectest
