// Package run is agentd's engine: a worker pool that claims runs from
// PostgreSQL (FOR UPDATE SKIP LOCKED, lease + heartbeat + epoch), and the agent
// loop that drives each run as a function of its committed state: rebuild the
// messages, ask the model, run the tools, repeat until a stop condition. Every
// fact is committed in the order of DESIGN section 5 before anything is shown.
//
// It imports the domain (agentd), persist, llm, tools, compact, clean,
// telemetry and metrics.
package run
