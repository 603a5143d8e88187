// The SDK's tests, against a live agentd (AGENTD_URL) that runs the built-in
// fake model; cmd/server's TestTypeScriptSDK starts one and runs them. The
// fake answers the directives of the last user message (docs/fake-model.md):
// /call NAME ARGS, /say TEXT, /stream N MS.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Agentd, AgentdError, isCode, isEnded, type RunEvent } from '../src/index.js';

const base = process.env.AGENTD_URL ?? '';
const approvalTool = process.env.AGENTD_APPROVAL_TOOL ?? '';
const skip = base === '' ? 'AGENTD_URL is not set: these tests run against a live agentd' : false;

const client = (f?: (r: Request) => Promise<Response>) => new Agentd({ baseUrl: base, fetch: f, backoffMs: 50 });

async function collect(it: AsyncIterable<RunEvent>): Promise<RunEvent[]> {
  const out: RunEvent[] = [];
  for await (const ev of it) out.push(ev);
  return out;
}

function assertGapless(events: RunEvent[], from = 1) {
  assert.deepEqual(
    events.map((e) => e.seq),
    events.map((_, i) => from + i),
    'seq goes up by exactly 1',
  );
}

/** sseOf is the wire form of stored events, as GET /runs/{id}/events writes each. */
function sseOf(events: RunEvent[]): string {
  return events.map((e) => `id: ${e.seq}\nevent: ${e.type}\ndata: ${e.raw}\n\n`).join('');
}

/** replay is the whole body of a plain GET /runs/{id}/events of a run that has ended, its retry: hint left out. */
async function replay(id: string): Promise<string> {
  const res = await fetch(`${base}/runs/${id}/events`);
  assert.equal(res.status, 200);
  return (await res.text()).replace(/^retry: \d+\n\n/, '');
}

/**
 * cuttingFetch is a fetch whose first event stream is cut (its connection
 * aborted) after cutAt bytes, mid-event; it records each stream request's
 * Last-Event-ID and the bytes each connection delivered.
 */
function cuttingFetch(cutAt: number) {
  const streams: { lastEventId: string | null; bytes: Uint8Array[] }[] = [];
  const f = async (req: Request): Promise<Response> => {
    if (!new URL(req.url).pathname.endsWith('/events')) return fetch(req);
    const ac = new AbortController();
    req.signal.addEventListener('abort', () => ac.abort());
    const res = await fetch(new Request(req, { signal: ac.signal }));
    if (!res.body) return res; // 204: the run has ended
    const conn = { lastEventId: req.headers.get('Last-Event-ID'), bytes: [] as Uint8Array[] };
    streams.push(conn);
    const cut = streams.length === 1;
    let n = 0;
    const body = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, ctl) {
          if (cut && n + chunk.length > cutAt) {
            const part = chunk.slice(0, cutAt - n);
            conn.bytes.push(part);
            ctl.enqueue(part);
            ac.abort(); // the connection goes, as a dropped one does
            ctl.error(new TypeError('connection cut by the test'));
            return;
          }
          n += chunk.length;
          conn.bytes.push(chunk);
          ctl.enqueue(chunk);
        },
      }),
    );
    return new Response(body, { status: res.status, headers: res.headers });
  };
  return { f, streams };
}

const text = (chunks: Uint8Array[]) => Buffer.concat(chunks).toString('utf8');

describe('agentd TypeScript SDK', { skip, concurrency: true }, () => {
  it('creates a run and follows its events to its end', async () => {
    const c = client();
    const run = await c.createRun({ input: '/call calculator {"expression": "6*7"}\n/say The answer is 42.' });
    assert.ok(['queued', 'running'].includes(run.status));
    const events = await collect(c.events(run.id));
    assertGapless(events);
    assert.equal(events[0].type, 'run.created');
    const last = events[events.length - 1];
    assert.equal(last.type, 'run.completed');
    if (last.type === 'run.completed') assert.equal(last.data.output_text, 'The answer is 42.'); // the data typed by its event's type
    assert.ok(events.some((e) => e.type === 'tool_call.completed'));
    const done = await c.getRun(run.id);
    assert.equal(done.status, 'completed');
    assert.equal(done.output_text, 'The answer is 42.');
    assert.equal(sseOf(events), await replay(run.id), 'the events are the bytes of the stored log');
  });

  it('resumes a dropped stream with Last-Event-ID: gapless, and byte for byte the rest', async () => {
    const { f, streams } = cuttingFetch(900);
    const c = client(f);
    const run = await c.createRun({ input: '/stream 12 100\n/say One two three four five six seven eight nine ten eleven twelve.' });
    const events = await collect(c.events(run.id, { reconnectWaitMs: 50 })); // back while the run still streams
    assertGapless(events);
    assert.equal(events[events.length - 1].type, 'run.completed');
    assert.ok(streams.length >= 2, `${streams.length} connections`);
    // The first connection was cut mid-event; the second started after the
    // last whole event received, and its bytes continue the first's.
    const first = text(streams[0].bytes);
    const whole = first.slice(0, first.lastIndexOf('\n\n') + 2);
    assert.notEqual(whole, first, 'the cut fell inside an event');
    const lastId = [...whole.matchAll(/^id: (\d+)$/gm)].pop()![1];
    assert.equal(streams[0].lastEventId, null);
    assert.equal(streams[1].lastEventId, lastId);
    const rest = streams.slice(1).map((s) => text(s.bytes).replace(/^retry: \d+\n\n/, '')).join('');
    const all = await replay(run.id);
    assert.equal(whole.replace(/^retry: \d+\n\n/, '') + rest, all, 'the two connections are the stored log, byte for byte');
    assert.equal(sseOf(events), all);
    assert.equal((await c.getRun(run.id)).output_text, 'One two three four five six seven eight nine ten eleven twelve.');
  });

  it('retries a POST whose answer was lost with the same Idempotency-Key: one run', async () => {
    const keys: string[] = [];
    let lostId = '';
    let replayed: string | null = null;
    const f = async (req: Request): Promise<Response> => {
      if (req.method !== 'POST') return fetch(req);
      keys.push(req.headers.get('Idempotency-Key') ?? '');
      const res = await fetch(req);
      if (keys.length === 1) {
        lostId = ((await res.json()) as { id: string }).id;
        throw new TypeError('fetch failed'); // the run was made; its answer is lost
      }
      replayed = res.headers.get('Idempotent-Replayed');
      return res;
    };
    const c = client(f);
    const run = await c.createRun({ input: '/say Once.' });
    assert.equal(keys.length, 2);
    assert.match(keys[0], /^[0-9a-f-]{36}$/);
    assert.equal(keys[1], keys[0], 'the retry carries the same key');
    assert.equal(run.id, lostId, 'the retry answers the run the lost answer held');
    assert.equal(replayed, 'true');

    // A key of the caller's: the same request again is the same run; another body is refused.
    const plain = client();
    const key = `sdk-test-${crypto.randomUUID()}`;
    const a = await plain.createRun({ input: '/say Twice?' }, { idempotencyKey: key });
    const b = await plain.createRun({ input: '/say Twice?' }, { idempotencyKey: key });
    assert.equal(b.id, a.id);
    await assert.rejects(plain.createRun({ input: '/say Another.' }, { idempotencyKey: key }), (err: unknown) => {
      assert.ok(isCode(err, 'idempotency_key_reused'), String(err));
      assert.equal(err.status, 422);
      return true;
    });
  });

  it('throws a typed AgentdError from a problem+json answer', async () => {
    const c = client();
    await assert.rejects(c.createRun({ input: 'hello', max_steps: 1000 }), (err: unknown) => {
      assert.ok(err instanceof AgentdError);
      assert.equal(err.status, 422);
      assert.equal(err.code, 'invalid_field');
      assert.equal(err.field, 'max_steps');
      assert.equal(err.type, 'https://agentd.dev/problems/invalid_field');
      assert.ok(err.title !== '' && err.detail !== undefined && err.requestId !== undefined);
      return true;
    });
    await assert.rejects(c.createRun({ input: 'hello', timeouts: { step_ms: -1 } }), (err: unknown) => {
      assert.ok(isCode(err, 'invalid_field'));
      assert.equal(err.field, 'timeouts.step_ms');
      return true;
    });
    const missing = '00000000-0000-0000-0000-000000000000';
    await assert.rejects(c.getRun(missing), (err: unknown) => isCode(err, 'run_not_found') && err.status === 404);
    await assert.rejects(collect(c.events(missing)), (err: unknown) => isCode(err, 'run_not_found'));
    // The generated client answers {error} rather than throwing.
    const { error, response } = await c.raw.GET('/runs', { params: { query: { limit: 0 } } });
    assert.equal(response.status, 422);
    assert.equal(error?.code, 'invalid_field');
    assert.equal(error?.field, 'limit');
  });

  it('steers a run while it streams its answer', async () => {
    const c = client();
    const run = await c.createRun({ input: '/stream 8 80\n/say A first answer, streamed slowly.' });
    const events: RunEvent[] = [];
    let input;
    for await (const ev of c.events(run.id)) {
      events.push(ev);
      if (ev.type === 'message.delta' && !input) input = await c.steer(run.id, '/say The steered answer.', { idempotencyKey: `steer-${run.id}` });
    }
    assert.ok(input);
    assert.equal(input.status, 'pending');
    const again = await c.steer(run.id, '/say The steered answer.', { idempotencyKey: `steer-${run.id}` });
    assert.equal(again.id, input.id, 'the same key is the same input');
    assertGapless(events);
    const types = events.map((e) => e.type);
    assert.ok(types.includes('input.accepted') && types.includes('input.applied'), types.join(' '));
    const done = await c.getRun(run.id);
    assert.equal(done.status, 'completed');
    assert.equal(done.output_text, 'The steered answer.');
    const inputs = await c.inputs(run.id);
    assert.deepEqual(inputs.data.map((i) => i.status), ['applied']);
  });

  it('waits for an approval, approves, and follows the run on', { skip: approvalTool === '' && 'AGENTD_APPROVAL_TOOL is not set' }, async () => {
    const c = client();
    const run = await c.createRun({ input: `/call ${approvalTool} {"n": 1}\n/say Approved and done.`, tools: [approvalTool] });
    let last = 0;
    for await (const ev of c.events(run.id)) {
      last = ev.seq;
      if (ev.type === 'run.requires_action') break; // the stream stays open while the run waits
    }
    const waiting = await c.waitRun(run.id, { settled: true });
    assert.equal(waiting.status, 'requires_action');
    assert.equal(waiting.required_action?.type, 'tool_approval');
    assert.equal(waiting.required_action?.name, approvalTool);
    await c.approve(run.id);
    const rest = await collect(c.events(run.id, { after: last }));
    assertGapless(rest, last + 1);
    const types = rest.map((e) => e.type);
    assert.ok(types.includes('tool_call.approved') && types.includes('tool_call.completed'), types.join(' '));
    assert.equal(types[types.length - 1], 'run.completed');
    const done = await c.getRun(run.id);
    assert.equal(done.output_text, 'Approved and done.');
  });

  it('gives the results of client tools back to a waiting run', async () => {
    const c = client();
    const run = await c.createRun({
      input: '/call get_weather {"city": "Paris"}\n/say It is sunny in Paris.',
      tools: [],
      client_tools: [{ name: 'get_weather', description: 'The weather in a city.', parameters: { type: 'object' } }],
    });
    const waiting = await c.waitRun(run.id, { settled: true });
    assert.equal(waiting.required_action?.type, 'client_tool_calls');
    const calls = waiting.required_action?.calls ?? [];
    assert.deepEqual(calls.map((k) => [k.name, k.arguments]), [['get_weather', { city: 'Paris' }]]);
    await c.submitToolOutputs(run.id, calls.map((k) => ({ tool_call_id: k.tool_call_id, output: { sky: 'clear', celsius: 21 } })));
    const done = await c.waitRun(run.id);
    assert.equal(done.output_text, 'It is sunny in Paris.');
    const steps = await c.steps(run.id);
    assert.deepEqual(steps.data[0].tool_calls.map((k) => k.result), [{ sky: 'clear', celsius: 21 }]);
  });

  it("follows a sub-agent's events inside its parent's stream", async () => {
    const c = client();
    const name = `researcher-${crypto.randomUUID().slice(0, 8)}`;
    await c.agents.create({ name, description: 'looks things up', instructions: 'research', tools: [] });
    const task = JSON.stringify({ task: '/say Found it.' });
    const run = await c.createRun({ input: `/call ${name} ${task}\n/say Done.`, tools: [{ type: 'agent', agent: name }] });
    const events = await collect(c.events(run.id, { children: true }));
    const own = events.filter((e) => !e.child);
    const children = events.filter((e) => e.child);
    assertGapless(own);
    const started = own.find((e) => e.type === 'agent.started');
    assert.ok(started && started.type === 'agent.started');
    const childId = started.data.run_id;
    assert.ok(children.length > 0 && children.every((e) => e.run_id === childId));
    assertGapless(children);
    const end = children[children.length - 1];
    assert.ok(end.type === 'run.completed' && end.data.output_text === 'Found it.', end.raw);
    // The child's events come before the tool_call.completed its end gave its call.
    const completed = events.findIndex((e) => !e.child && e.type === 'tool_call.completed');
    assert.ok(events.indexOf(end) < completed);
    assert.equal((await c.getRun(run.id)).output_text, 'Done.');
  });

  it("evaluates an agent's versions on a dataset's cases", async () => {
    const c = client();
    const id = crypto.randomUUID().slice(0, 8);
    const agent = await c.agents.create({ name: `evaluated-${id}`, instructions: 'Answer.', tools: [] });
    await c.agents.update(agent.name, { instructions: 'Answer briefly.' });
    await c.datasets.create({
      name: `evaluated-${id}`,
      cases: [
        { id: 'says-ok', input: '/say ok', checks: [{ type: 'equals', value: 'ok' }] },
        { id: 'says-no', input: '/say no', checks: [{ type: 'contains', value: 'yes' }] },
      ],
    });
    const started = await c.evals.create({ agent: agent.name, versions: [1, 2], dataset: `evaluated-${id}` });
    assert.equal(started.status, 'running');
    const done = await c.evals.wait(started.id);
    assert.equal(done.status, 'completed', JSON.stringify(done.error));
    assert.equal(done.runs, 4);
    const versions = done.report?.versions ?? [];
    assert.deepEqual(versions.map((v) => [v.runs, v.passed]), [[2, 1], [2, 1]]);
    assert.ok((await c.evals.list()).data.some((e) => e.id === started.id));
  });

  it('cancels and resumes a run: its events are one log through both ends', async () => {
    const c = client();
    const run = await c.createRun({ input: '/stream 20 80\n/say Resumed to the end.' });
    for await (const ev of c.events(run.id)) if (ev.type === 'message.delta') break;
    await c.cancelRun(run.id);
    const cancelled = await c.waitRun(run.id);
    assert.equal(cancelled.status, 'cancelled');
    await c.resumeRun(run.id);
    const done = await c.waitRun(run.id);
    assert.equal(done.status, 'completed');
    assert.ok(isEnded(done));
    const events = await collect(c.events(run.id));
    assertGapless(events);
    const types = events.map((e) => e.type);
    const at = types.indexOf('run.cancelled');
    assert.ok(at > 0 && types.indexOf('run.resumed') > at, types.join(' '));
    assert.equal(types[types.length - 1], 'run.completed');
  });

  it('manages agents, schedules, webhooks, memory and datasets', async () => {
    const c = client();
    const id = crypto.randomUUID().slice(0, 8);
    const agent = await c.agents.create({ name: `helper-${id}`, instructions: 'You help.', tools: [] });
    assert.equal(agent.version, 1);
    const run = await c.createRun({ agent: agent.name, input: '/say From the agent.' }, { wait: 20 });
    assert.equal(run.agent?.name, agent.name);
    assert.equal(run.output_text, 'From the agent.');
    await c.agents.update(agent.name, { instructions: 'You help more.' });
    assert.equal((await c.agents.get(agent.name)).version, 2);
    assert.equal((await c.agents.get(agent.name, 1)).instructions, 'You help.');

    const schedule = await c.schedules.create({ name: `nightly-${id}`, cron: '0 3 * * *', timezone: 'Europe/Paris', run: { input: '/say Nightly.' } });
    assert.equal((await c.schedules.pause(schedule.id)).paused, true);
    await c.schedules.delete(schedule.id);
    await assert.rejects(c.schedules.get(schedule.id), (err: unknown) => isCode(err, 'schedule_not_found'));

    const hook = await c.webhooks.create({ url: 'https://hooks.example.com/agentd', events: ['run.completed'] });
    assert.match(hook.secret ?? '', /^whsec_/);
    assert.ok((await c.webhooks.list()).data.some((w) => w.id === hook.id));
    await c.webhooks.delete(hook.id);

    const ns = ['sdk', id];
    await c.memory.put({ namespace: ns, key: 'units', value: 'The user prefers metric units.' });
    assert.equal((await c.memory.get(ns.join('/'), 'units')).value, 'The user prefers metric units.');
    const found = await c.memory.search({ namespace_prefix: ns, query: 'metric units' });
    assert.ok(found.data.some((h) => h.key === 'units'));

    const ds = await c.datasets.create({ name: `arith-${id}`, cases: [{ id: 'six-by-seven', input: 'What is 6*7?' }] });
    assert.equal(ds.version, 1);
    const cases = await c.datasets.cases(ds.name);
    assert.deepEqual(cases.data.map((k) => k.id), ['six-by-seven']);
    assert.equal((await c.datasets.removeCase(ds.name, 'six-by-seven')).version, 2);
  });
});
