// Package schedule fires schedules (docs/schedules.md): each instance runs
// a Scheduler, whose loop claims due schedules for a short lease (FOR
// UPDATE SKIP LOCKED, no leader), as many as it has free workers; makes
// each slot's run spec outside any transaction, in a goroutine of its own
// under its own timeout, so that a slow one holds back no other; then
// starts the slot's run in the transaction that advances the schedule,
// if the claim still holds. It counts the ends of the runs, pausing a
// schedule whose runs fail too many times in a row. The timing of a
// schedule (its cron expression in its time zone) is the domain's
// (agentd.ParseTiming), which the API checks too.
//
// It imports the domain (agentd), persist and metrics; the run of a slot
// is composed through the Composer port it declares, which the composer
// (internal/compose) implements.
package schedule
