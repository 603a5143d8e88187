// Package eval scores an evaluation's runs: the deterministic scorers of
// a dataset case's checks (Score), which read only what was stored of a
// run, never what its model said of itself, and the loader of that
// evidence (Load) through the Store port it declares, which
// internal/persist implements.
//
// Each score records the fields and tool calls it read, so that a report
// shows why a case passed or failed. Checks that are not deterministic
// (rubric, webhook) are not scored here: their score says so.
//
// It may import the domain (agentd) only.
package eval
