// OpenAI's Node.js SDK (the npm openai package) against agentd's
// Conversations API, with no code of agentd's: the Go test
// TestOpenAINodeConversationItems runs one scenario and checks what this
// prints (one JSON object).
//
//   node conversations.mjs BASE_URL SCENARIO
import OpenAI from 'openai';

const [base, scenario] = process.argv.slice(2);
// No retries: the SDK retries a 409, and a busy conversation must be seen
// at once.
const client = new OpenAI({ baseURL: base + '/v1', apiKey: process.env.AGENTD_API_KEY || 'local', maxRetries: 0 });

// failure is what an SDK error says.
function failure(err) {
  return { class: err.constructor.name, status: err.status, param: err.param ?? err.error?.param ?? null,
    code: err.code ?? null, type: err.type ?? null, message: err.message, requestID: err.request_id ?? err.requestID ?? null };
}

// attempt runs f and returns what the SDK raised, or null.
async function attempt(f) {
  try {
    await f();
    return null;
  } catch (err) {
    return failure(err);
  }
}

// all reads every item of a conversation, oldest first, two to a page.
async function all(id) {
  const out = [];
  for await (const it of client.conversations.items.list(id, { order: 'asc', limit: 2 })) out.push(it);
  return out;
}

// brief is what the test compares of an item.
function brief(i) {
  return { id: i.id, type: i.type, role: i.role ?? null, text: i.content?.[0]?.text ?? null, call_id: i.call_id ?? null,
    output: i.output ?? null };
}

const scenarios = {
  // items: a conversation created with items, more added, listed,
  // retrieved, one deleted, and a response that is sent them: its input
  // has no user message of its own, so the fake model follows the
  // directive of the last user message, an added item.
  async items() {
    const c = await client.conversations.create({ metadata: { topic: 'demo' }, items: [
      { type: 'message', role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: 'My name is Ada.' },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello Ada.' }] }] });
    const added = await client.conversations.items.create(c.id, { items: [
      { type: 'function_call', call_id: 'call_x', name: 'lookup', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_x', output: 'sunny' },
      { role: 'user', content: [{ type: 'input_text', text: '/say Sunny in Paris, Ada.' }] }] });
    const before = await all(c.id);
    const one = await client.conversations.items.retrieve(added.data[2].id, { conversation_id: c.id });
    const deleted = await client.conversations.items.delete(before[0].id, { conversation_id: c.id });
    const gone = await attempt(() => client.conversations.items.retrieve(before[0].id, { conversation_id: c.id }));
    const r = await client.responses.create({ model: 'fake', conversation: c.id,
      input: [{ role: 'developer', content: 'Use what the user said.' }] });
    const after = await all(c.id);
    return { id: c.id, object: c.object, metadata: c.metadata,
      added: { object: added.object, first_id: added.first_id, last_id: added.last_id, has_more: added.has_more,
        data: added.data.map(brief) },
      before: before.map(brief), one: brief(one), deleted, gone,
      response: { status: r.status, output_text: r.output_text, conversation: r.conversation },
      after: after.map(brief) };
  },
  // refusals: what the SDK raises for a busy conversation, an item agentd
  // cannot add, a function call's delete, and an unknown item.
  async refusals() {
    const c = await client.conversations.create({ items: [{ role: 'user', content: 'first' }] });
    const call = await client.conversations.items.create(c.id, { items: [
      { type: 'function_call', call_id: 'call_y', name: 'lookup', arguments: '{}' },
      { type: 'function_call_output', call_id: 'call_y', output: 'x' }] });
    const bg = await client.responses.create({ model: 'fake', conversation: c.id, input: '/stream 50 100', background: true });
    const busy = await attempt(() => client.conversations.items.create(c.id, { items: [{ role: 'user', content: 'late' }] }));
    const busyDelete = await attempt(() => client.conversations.items.delete(call.data[0].id, { conversation_id: c.id }));
    await client.responses.cancel(bg.id);
    for (let i = 0; i < 100 && ['queued', 'in_progress'].includes((await client.responses.retrieve(bg.id)).status); i++) {
      await new Promise((ok) => setTimeout(ok, 100));
    }
    return {
      busy, busyDelete,
      badRole: await attempt(() => client.conversations.items.create(c.id, { items: [{ role: 'robot', content: 'x' }] })),
      unanswered: await attempt(() => client.conversations.items.create(c.id, { items: [
        { type: 'function_call', call_id: 'call_z', name: 'lookup', arguments: '{}' }] })),
      tooMany: await attempt(() => client.conversations.create({
        items: Array.from({ length: 21 }, () => ({ role: 'user', content: 'x' })) })),
      deleteCall: await attempt(() => client.conversations.items.delete(call.data[0].id, { conversation_id: c.id })),
      unknown: await attempt(() => client.conversations.items.delete('msg_' + '0'.repeat(32), { conversation_id: c.id })),
      later: (await client.conversations.items.create(c.id, { items: [{ role: 'user', content: 'in time' }] })).data.map(brief),
    };
  },
};

const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await run()));
} catch (err) {
  console.log(JSON.stringify({ error: failure(err) }));
}
