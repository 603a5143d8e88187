// Reads a run's event stream with the eventsource package (a WHATWG
// EventSource), letting it reconnect by itself with Last-Event-ID, and prints
// each event as one JSON line {"id","event","data"} until a terminal event.
// Usage: node client.mjs URL
import { EventSource } from "eventsource";

const types = [
  "run.created", "run.started", "run.resumed", "step.started", "message.delta", "message.completed",
  "tool_call.created", "tool_attempt.started", "tool_attempt.failed", "tool_call.completed", "tool_call.reused",
  "tool_call.unknown", "tool_call.retry_allowed", "step.completed", "step.retracted", "run.requires_action",
  "run.completed", "run.failed", "run.cancelled", "run.timed_out", "run.interrupted",
];
const terminal = new Set(["run.completed", "run.failed", "run.cancelled", "run.timed_out", "run.interrupted"]);

const es = new EventSource(process.argv[2]);
let opens = 0;
es.onopen = () => { opens++; process.stderr.write(`open ${opens}\n`); };
es.onerror = (e) => { process.stderr.write(`error (reconnecting): ${e.message ?? ""}\n`); };
for (const t of types) {
  es.addEventListener(t, (ev) => {
    process.stdout.write(JSON.stringify({ id: ev.lastEventId, event: ev.type, data: ev.data }) + "\n");
    if (terminal.has(ev.type)) {
      es.close();
      process.stderr.write(`done after ${opens} connections\n`);
      process.exit(0);
    }
  });
}
setTimeout(() => { process.stderr.write("timed out\n"); process.exit(2); }, 60000);
