// The README's examples, run against the live agentd of sdk.test.ts (in a
// tenant of their own, so that they run again on the same server).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { Agentd, isCode } from '../src/index.js';

const base = process.env.AGENTD_URL ?? '';

it('runs the README examples', { skip: base === '' && 'AGENTD_URL is not set' }, async () => {
  const agentd = new Agentd({ baseUrl: base, apiKey: process.env.AGENTD_API_KEY, tenant: `readme-${crypto.randomUUID().slice(0, 8)}` });

  // Use
  const run = await agentd.createRun({ input: '/call calculator {"expression": "6*7"}\n/say The answer is 42.' });
  const seen: string[] = [];
  for await (const ev of agentd.events(run.id)) seen.push(`${ev.seq} ${ev.type}`);
  assert.equal(seen[0], '1 run.created');
  assert.equal(seen[seen.length - 1], '13 run.completed');
  const done = await agentd.getRun(run.id);
  assert.deepEqual([done.status, done.output_text], ['completed', 'The answer is 42.']);

  // Idempotency keys
  const key = `report-${crypto.randomUUID()}`;
  const a = await agentd.createRun({ input: 'Summarise the report.' }, { idempotencyKey: key });
  const b = await agentd.createRun({ input: 'Summarise the report.' }, { idempotencyKey: key });
  assert.equal(b.id, a.id);

  // Errors
  let field: string | undefined;
  try {
    await agentd.createRun({ input: 'Hi', max_steps: 1000 });
  } catch (err) {
    if (isCode(err, 'invalid_field')) field = err.field;
    else throw err;
  }
  assert.equal(field, 'max_steps');

  // Agents, schedules, webhooks, memory, datasets
  await agentd.agents.create({ name: 'helper', instructions: 'You help {{who}}.', tools: ['calculator'] });
  const helped = await agentd.createRun({ agent: 'helper', variables: { who: 'Ann' }, input: 'What is 6*7?' }, { wait: 20 });
  assert.equal(helped.instructions, 'You help Ann.');
  assert.equal((await agentd.agents.update('helper', { instructions: 'You help {{who}} briefly.' })).version, 2);
  const s = await agentd.schedules.create({ name: 'nightly', cron: '0 3 * * *', timezone: 'Europe/Paris',
    run: { agent: 'helper', variables: { who: 'the team' }, input: 'Write the report.' } });
  assert.equal((await agentd.schedules.pause(s.id)).paused, true);
  const hook = await agentd.webhooks.create({ url: 'https://hooks.example.com/agentd', events: ['run.completed'] });
  assert.match(hook.secret ?? '', /^whsec_/);
  await agentd.webhooks.delete(hook.id);
  await agentd.memory.put({ namespace: ['users', 'u-42'], key: 'units', value: 'Prefers metric units.' });
  const hits = await agentd.memory.search({ namespace_prefix: ['users', 'u-42'], query: 'units' });
  assert.equal(hits.data[0]?.key, 'units');
  await agentd.datasets.create({ name: 'arithmetic', cases: [{ id: 'six-by-seven', input: 'What is 6*7?' }] });
  const ds = await agentd.datasets.addCases('arithmetic', { cases: [{ from_run: run.id, at_step: 1 }] });
  assert.equal(ds.case_count, 2);
  const ev = await agentd.evals.create({ agent: 'helper', versions: [1, 2], dataset: 'arithmetic' });
  const report = (await agentd.evals.wait(ev.id)).report; // per version: pass rate, pass@k, cost; regressions first
  assert.equal(report?.versions.length, 2);

  // Steering, cancel, resume, forks
  const fork = await agentd.fork(run.id, { at_step: 1, input: '/say 56.' });
  assert.equal((await agentd.waitRun(fork.id)).output_text, '56.');
  const sent = await agentd.sendMessage(run.conversation_id, { input: '/say And in Fahrenheit?' });
  assert.equal(sent.action, 'started');

  // Every other route
  const usage = await agentd.ok(agentd.raw.GET('/usage', { params: { query: { group_by: 'model' } } }));
  assert.ok(usage);
  const { data, error } = await agentd.raw.GET('/conversations/{id}/messages', { params: { path: { id: run.conversation_id } } });
  assert.equal(error, undefined);
  assert.ok((data?.data.length ?? 0) >= 4);
});
