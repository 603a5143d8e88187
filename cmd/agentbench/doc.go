// Command agentbench measures agentd on this machine and prints its figures:
//
//   - floor: what PostgreSQL itself sustains here, 16 connections committing
//     transactions of 5 single-row inserts (200-byte jsonb);
//   - steps: 16 concurrent runs of 3 durable steps each (the model asks for a
//     tool, the tool runs, the model answers) driven through the engine:
//     steps/s and its ratio to the floor, write transactions, WAL bytes and
//     agentd CPU per step;
//   - http: whole runs over HTTP (POST /runs, then the SSE stream to the
//     terminal event) at 1, 16 and 64 concurrent clients; start latency
//     (POST /runs to the first SSE event);
//   - stream: event append rate, commit-to-client delivery latency with 1 and
//     100 subscribers per run, replay speed of a 10,000-event run, and the
//     memory of 1,000 open SSE connections (to one run, and to 1,000 runs);
//   - compaction, path and answers: a long conversation's compactions; the
//     product's path with each part in its own process; a streamed answer
//     against a one-word one, and against the floor: a bare relay of the
//     same model's stream (-serve-relay, a child process), CPU per
//     streamed token of agentd and PostgreSQL to the relay's (target 1.5);
//   - dbos: agentd's 3-step run over HTTP beside DBOS Transact Go's 3-step
//     workflow (bench/dbos, a module of its own, built from the repository),
//     16 clients each on the same PostgreSQL: runs/s and machine CPU per
//     unit as ratios, and PostgreSQL's share of each.
//   - steer: a run whose second user message is sent while it works (POST
//     /runs/{id}/input, applied at the step boundary after its tool call)
//     against the same run with both messages at the start, alternated in
//     one run, 16 clients: per run, agentd's and its database's backends'
//     CPU, the write transactions and WAL of its database (read back from
//     the WAL), and the ratios of the steered run to the other, whose
//     target is 1.1.
//   - memory: the answers phase's 3-step run of an agent that pins its
//     user's memory (40 items, 16 KiB of text: the cap) against the same
//     run of an agent alike but without memory, alternated in one run, 16
//     clients: per run, agentd's, PostgreSQL's and the machine's CPU,
//     write transactions, WAL and the bytes the fake model received, and
//     the ratios of the pinned run to the plain one; agentd's CPU has the
//     target 1.5.
//
// Each of -reps repetitions (3 by default) runs every selected benchmark
// once, so that drift of the machine spreads across them; the steps ratio is
// to the floor of the same repetition. The command then prints a table, one
// row per figure: its median and range over the repetitions, its target and
// whether the median meets it. -json writes every repetition's figures, the
// machine and the options to a file.
//
// Per unit of work (step, run, event), write transactions are the
// transaction ids PostgreSQL assigned (pg_current_snapshot), commits those
// of the benchmark's database (pg_stat_database), WAL the bytes between two
// positions (pg_current_wal_lsn), and CPU this process's (getrusage). Ids and
// WAL are the whole cluster's: agentbench warns when other databases were
// busy meanwhile. The floor and steps benchmarks also give where the
// machine's CPU went per unit, read from /proc: the fake model's process,
// PostgreSQL's processes (when it runs on this machine), and the whole
// machine's busy time, so that a step's cost can be set against a floor
// transaction's.
//
// The benchmarks run agentd as cmd/server does, group commit included, and
// check it kept its guarantees: after the steps and http benchmarks, a sample
// of the runs that ended is read back (event seqs 1..N, one terminal event,
// last and agreeing with the run's status; each tool call succeeded at most
// once, and exactly once in a completed run, under a key of its own; usage
// the sum of the steps'), and the SSE transcripts of a few runs must be the
// stored events byte for byte. A violation is printed and counted, and makes
// the command exit non-zero.
//
// The fake model runs in a child process, so that the CPU measured is
// agentd's. Each benchmark uses a database of its own, dropped at the end.
// `agentbench -quick` is a short configuration for a smoke run.
package main
