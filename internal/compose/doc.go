// Package compose is where every run agentd makes is composed: it turns
// an intent (a request's fields, a stored agent version, a schedule's run
// template, a sub-agent call, a fork of a recorded run, a protocol door's
// request) into the domain's run create, through the one run-spec builder
// (runspec, which stays pure) with the run's tenant's tools and agents.
//
// Tenant and actor are parameters, never a caller put into a context: a
// schedule's slot is composed for the schedule's tenant and creator, a
// child run for its parent's. The composer does no HTTP; the ports it
// reads through (Agents, Tools) are declared here, where they are used,
// and cmd/server checks their implementations.
//
// It also owns the stored form of a run's fields (Fields, AgentDefinition,
// Template): agent versions and schedules keep them as JSON, and POST
// /runs embeds them, so that a change of a door's request is never a
// silent change of how stored rows read (testdata/previous.json holds rows
// as an earlier release stored them).
//
// It may import the domain, internal/runspec and internal/tools.
package compose
