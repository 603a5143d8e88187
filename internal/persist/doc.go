// Package persist is agentd's storage: the pgx pool, every SQL statement of
// the project, the one transaction helper, the row types, migrations at
// start-up, and the LISTEN bridge. Every write the executor makes is fenced by
// the run's epoch: a worker that lost its lease gets ErrLeaseLost and commits
// nothing.
//
// It imports vocab and event (the vocabulary) and migrations, nothing else
// of agentd's.
package persist
