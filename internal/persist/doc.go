// Package persist is agentd's storage: the pgx pool, every SQL statement of
// the project, the one transaction helper, the row types, migrations at
// start-up, and the LISTEN bridge. Every write the executor makes is fenced by
// the run's epoch: a worker that lost its lease gets ErrLeaseLost and commits
// nothing.
//
// It holds no business rule: what a cancel, a resume or a decision does is
// the domain's (agentd's rules.go); persist applies it under the run's
// lock. Every event that says a run stopped is written with its outbox row
// (RunEnd), whichever path wrote it.
//
// Driver errors become the domain's sentinels in one place (translate):
// those that say the database cannot serve now (refused or broken
// connections, a server shutting down or read-only) become
// agentd.ErrUnavailable, which the store also logs once per outage
// (health.go).
//
// It imports the domain (agentd) and migrations, nothing else of agentd's.
package persist
