// Package stream is agentd's event fan-out (DESIGN section 8): it serves a
// run's events as Server-Sent Events, replayed from the run_events table and
// then tailed live, so that a client may leave and rejoin, on any instance,
// and receive exactly the bytes it would have had.
//
// A Hub holds one LISTEN connection per instance and one feed per run that
// has subscribers here: the feed reads the run's new events once per wake-up
// (a local commit, a NOTIFY from another instance, or a slow poll) and hands
// them to every subscriber of the run. The Hub is the store's
// persist.Publisher: commits made on this instance reach it at once, and it
// tells the other instances with a coalesced NOTIFY sent outside the writing
// transaction. The table is the
// source of truth: a lost notification only delays a subscriber until the
// next poll, and a subscriber that falls behind is dropped and replays from
// the database when it reconnects. A run that is deleted (its
// conversation, or retention) ends its streams without a terminal event:
// at once on the instance told (Forget), within a poll interval on the
// others (the poll finds it missing), and its new streams are refused.
//
// HTTP belongs to the api package, which parses the request (the run's id,
// Last-Event-ID), checks who asks, and writes every problem body; the Hub
// takes typed arguments and writes only the event stream.
//
// It imports the domain (agentd), persist and metrics, nothing else of
// agentd's.
package stream
