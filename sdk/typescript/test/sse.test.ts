// readSSE, the Server-Sent Events parser of events(), on bodies cut at every
// byte: line ends of each kind, multi-byte characters, comments, retry hints.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { readSSE, type SSEMessage } from '../src/index.js';

function bodyOf(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(ctl) {
      for (const c of chunks) ctl.enqueue(c);
      ctl.close();
    },
  });
}

async function parse(chunks: Uint8Array[]) {
  const out: SSEMessage[] = [];
  const retries: number[] = [];
  for await (const m of readSSE(bodyOf(chunks), (ms) => retries.push(ms))) out.push(m);
  return { out, retries };
}

const wire =
  'retry: 2000\r\n\r\n' +
  ': a comment\n' +
  'id: 1\nevent: run.created\ndata: {"seq":1,"text":"héllo 🙂"}\n\n' +
  'event: heartbeat\rdata: {"status":"running"}\r\r' +
  'id: 2\r\nevent: message.delta\r\ndata: line one\r\ndata:line two\r\n\r\n' +
  'id: 3\ndata: not dispatched: no blank line after it\n';

const want: SSEMessage[] = [
  { id: '1', event: 'run.created', data: '{"seq":1,"text":"héllo 🙂"}' },
  { id: undefined, event: 'heartbeat', data: '{"status":"running"}' },
  { id: '2', event: 'message.delta', data: 'line one\nline two' },
];

it('parses a whole body', async () => {
  const { out, retries } = await parse([new TextEncoder().encode(wire)]);
  assert.deepEqual(out, want);
  assert.deepEqual(retries, [2000]);
});

it('parses the body cut at every byte', async () => {
  const bytes = new TextEncoder().encode(wire);
  for (let i = 1; i < bytes.length; i++) {
    const { out } = await parse([bytes.slice(0, i), bytes.slice(i)]);
    assert.deepEqual(out, want, `cut at byte ${i}`);
  }
  const { out } = await parse([...bytes].map((b) => Uint8Array.of(b)));
  assert.deepEqual(out, want, 'a byte at a time');
});
