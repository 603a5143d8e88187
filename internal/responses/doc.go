// Package responses speaks OpenAI's Responses API (and the Open Responses
// specification that follows it): the response object, its output items
// and the events of its stream, derived from a run's stored events, and
// the ids that carry OpenAI's prefixes. A response is a run; its id is the
// run's id with the prefix resp_, so that either maps to the other without
// a lookup.
//
// Like internal/aisdk, everything it writes is derived from committed
// events and the run's immutable fields only, so that a response's stream
// is the same bytes on every replay, on any instance, and a client resumes
// it with starting_after (a sequence number) as OpenAI's does. The
// requests are read by api, which owns HTTP; this package turns their
// fields into agentd's run spec (Request.Spec).
//
// It imports only the domain package (github.com/agentd/agentd),
// internal/runspec and internal/compact (whose instructions, transcript
// and summary text a standalone compaction uses) of agentd's.
package responses
