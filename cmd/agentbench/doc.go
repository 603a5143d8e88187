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
//     memory of 1,000 open SSE connections.
//
// The fake model runs in a child process, so that the CPU measured is
// agentd's. Each benchmark uses a database of its own, dropped at the end.
// `agentbench -quick` is a short configuration for a smoke run.
package main
