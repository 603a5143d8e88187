// Package schedule fires schedules (docs/schedules.md): each instance runs
// a Scheduler, whose loop takes the due schedules with FOR UPDATE SKIP
// LOCKED (no leader), starts each slot's run in the transaction that
// advances the schedule, and counts the ends of the runs, pausing a
// schedule whose runs fail too many times in a row. The timing of a
// schedule (its cron expression in its time zone) is the domain's
// (agentd.ParseTiming), which the API checks too.
//
// It imports the domain (agentd), persist and metrics; the run spec of a
// slot is built by a function the API provides (SpecFunc).
package schedule
