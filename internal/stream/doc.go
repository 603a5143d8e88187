// Package stream is agentd's event fan-out (DESIGN section 8): it serves a
// run's events as Server-Sent Events, replayed from the run_events table and
// then tailed live, so that a client may leave and rejoin, on any instance,
// and receive exactly the bytes it would have had.
//
// A Hub holds one LISTEN connection per instance and one feed per run that
// has subscribers here: the feed reads the run's new events once per wake-up
// (a local commit, a NOTIFY from another instance, or a slow poll) and hands
// them to every subscriber of the run. Commits made on this instance reach
// the Hub through Published, which also tells the other instances with a
// coalesced NOTIFY sent outside the writing transaction. The table is the
// source of truth: a lost notification only delays a subscriber until the
// next poll, and a subscriber that falls behind is dropped and replays from
// the database when it reconnects.
//
// It imports persist and nothing else of agentd's.
package stream
