// Command agentctl is the command-line client of agentd: it starts, reads,
// follows, steers, cancels and resumes runs, answers what a waiting run
// asks, reads conversations and tools, and talks with an agent in the
// terminal (agentctl chat), each line read from stdin a message sent while
// the agent may still be answering; it manages agents, schedules, webhooks,
// memory and datasets, and evaluates an agent's versions on a dataset as a
// gate for CI (agentctl eval run). It is built on agentd's Go SDK
// (github.com/agentd/agentd/client) and the domain package whose types the
// SDK speaks (github.com/agentd/agentd): statuses, event types, and each
// event's payload, read with Envelope.Payload. It imports nothing else of
// agentd's.
//
//	agentctl [-url URL] [-key KEY] [-o table|json] COMMAND [flags] [args]
//
// Run "agentctl help" for the list of commands. The exit status is 0 when
// a command worked (and, for the commands that follow a run, when the run
// completed), 1 when the run failed or timed out, 2 for a usage error or an
// error of the API, 3 when the run was cancelled or interrupted, and 4 when
// the run waits for a decision (requires_action). agentctl eval run exits
// 0 when the evaluation passes its gate, 1 when it does not (a version
// other than the baseline passes fewer runs than -fail-under, or regresses
// on a case the baseline passed, unless -allow-regressions) or the
// evaluation failed, and 3 when it was cancelled.
package main
