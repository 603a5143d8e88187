// OpenAI's Node.js SDK (the npm openai package) against agentd's /v1, with
// no code of agentd's: the Go test TestOpenAINodeSDK runs one scenario at a
// time and checks what this prints (one JSON object).
//
//   node responses.mjs BASE_URL SCENARIO [ARGS...]
import OpenAI from 'openai';

const [base, scenario, ...args] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: process.env.AGENTD_API_KEY || 'local', maxRetries: 2 });

// events reads a stream's events: their types, sequence numbers and text.
async function events(stream, stopAfter = Infinity) {
  const out = { types: [], seqs: [], text: '', final: null };
  for await (const ev of stream) {
    out.types.push(ev.type);
    out.seqs.push(ev.sequence_number);
    if (ev.type === 'response.output_text.delta') out.text += ev.delta;
    if (ev.type === 'response.completed' || ev.type === 'response.failed' || ev.type === 'response.incomplete' ||
        ev.type === 'response.cancelled') out.final = ev.response;
    if (out.types.length >= stopAfter) break; // the client goes away mid-stream
  }
  return out;
}

// failure is what an SDK error says.
function failure(err) {
  return { class: err.constructor.name, status: err.status, param: err.param ?? err.error?.param ?? null,
    code: err.code ?? null, type: err.type ?? null, message: err.message, requestID: err.request_id ?? err.requestID ?? null };
}

const scenarios = {
  // create: one response, waited for.
  async create([input]) {
    const r = await client.responses.create({ model: 'fake', input, instructions: 'be brief', metadata: { k: 'v' },
      temperature: 0.5, max_output_tokens: 200 });
    return { id: r.id, status: r.status, output_text: r.output_text, usage: r.usage, metadata: r.metadata,
      instructions: r.instructions, temperature: r.temperature, max_output_tokens: r.max_output_tokens, object: r.object };
  },
  // stream: create with stream: true, read to the end.
  async stream([input]) {
    const s = await client.responses.create({ model: 'fake', input, stream: true });
    const ev = await events(s);
    return { ...ev, id: ev.final?.id, output_text: ev.final?.output?.[0]?.content?.[0]?.text };
  },
  // background: a background response, its stream read for n events, then
  // given up (the Go test may kill agentd now).
  async background([input, n]) {
    const r = await client.responses.create({ model: 'fake', input, background: true });
    const s = await client.responses.retrieve(r.id, { stream: true });
    const ev = await events(s, Number(n));
    return { id: r.id, status: r.status, background: r.background, ...ev };
  },
  // resume: the stream of a response from after sequence number after.
  async resume([id, after]) {
    const s = await client.responses.retrieve(id, { stream: true, starting_after: Number(after) });
    return await events(s);
  },
  // replay: the SDK's stream helper for an existing response, which replays
  // it from its start and accumulates it.
  async replay([id]) {
    const s = client.responses.stream({ response_id: id });
    let deltas = '';
    s.on('response.output_text.delta', (e) => { deltas += e.delta; });
    const final = await s.finalResponse();
    return { id: final.id, status: final.status, output_text: final.output_text, deltas };
  },
  // cancel: a background response cancelled twice.
  async cancel([input]) {
    const r = await client.responses.create({ model: 'fake', input, background: true });
    const first = await client.responses.cancel(r.id);
    const second = await client.responses.cancel(r.id);
    const got = await client.responses.retrieve(r.id);
    return { id: r.id, first: first.status, second: second.status, same: JSON.stringify(first) === JSON.stringify(second),
      retrieved: got.status };
  },
  // chain: previous_response_id continues the conversation; a response
  // that is not the latest is continued in a fork of its conversation,
  // which the branch's own continuation then follows.
  async chain() {
    const a = await client.responses.create({ model: 'fake', input: '/say one', store: true });
    const b = await client.responses.create({ model: 'fake', input: 'second question', previous_response_id: a.id });
    const branch = await client.responses.create({ model: 'fake', input: '/say branched', previous_response_id: a.id });
    const next = await client.responses.create({ model: 'fake', input: '/say on the branch', previous_response_id: branch.id });
    const items = await client.responses.inputItems.list(b.id);
    const branchItems = await client.responses.inputItems.list(next.id, { order: 'asc' });
    const text = (i) => i.content?.[0]?.text;
    return { a: a.id, b: b.id, bStatus: b.status, previous: b.previous_response_id,
      branch: { id: branch.id, status: branch.status, text: branch.output_text, previous: branch.previous_response_id },
      next: { status: next.status, text: next.output_text },
      items: items.data.map((i) => ({ type: i.type, role: i.role, text: text(i) })),
      branchItems: branchItems.data.map((i) => ({ type: i.type, role: i.role, text: text(i) })) };
  },
  // tools: a function tool's call ends the response; its output, sent with
  // previous_response_id, continues the conversation; a continuation that
  // leaves the call unanswered is refused.
  async tools() {
    const weather = { type: 'function', name: 'get_weather', description: 'The weather in a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] }, strict: false };
    const a = await client.responses.create({ model: 'fake', tools: [weather],
      input: '/call get_weather {"city":"Paris"}\n/say It is sunny in Paris.' });
    const call = a.output.find((i) => i.type === 'function_call');
    let unanswered = null;
    try {
      await client.responses.create({ model: 'fake', previous_response_id: a.id, input: 'never mind', tools: [weather] });
    } catch (err) {
      unanswered = failure(err);
    }
    const s = await client.responses.create({ model: 'fake', previous_response_id: a.id, tools: [weather], stream: true,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"sky":"clear"}' }] });
    const ev = await events(s);
    const items = await client.responses.inputItems.list(ev.final.id);
    return { a: { id: a.id, status: a.status, output_text: a.output_text, tools: a.tools,
      call: call && { name: call.name, arguments: call.arguments, call_id: call.call_id, id: call.id, status: call.status } },
      unanswered, b: { id: ev.final.id, status: ev.final.status, text: ev.text, previous: ev.final.previous_response_id },
      items: items.data.map((i) => ({ type: i.type, call_id: i.call_id, output: i.output })) };
  },
  // media: a response whose input holds an input_image and an input_file
  // (data URLs) and an image by URL, of model (default fake); its answer
  // (the fake's /media lists what the model received), its input items,
  // and the artifacts they name, fetched.
  async media([model]) {
    const png = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
    const pdf = Buffer.from('%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n').toString('base64');
    const r = await client.responses.create({ model: model || 'fake', input: [{ role: 'user', content: [
      { type: 'input_text', text: '/media' },
      { type: 'input_image', image_url: `data:image/png;base64,${png}`, detail: 'high' },
      { type: 'input_image', image_url: 'https://example.com/cat.png', detail: 'auto' },
      { type: 'input_file', file_data: `data:application/pdf;base64,${pdf}`, filename: 'report.pdf' },
    ] }] });
    const items = await client.responses.inputItems.list(r.id);
    const content = items.data[0].content;
    const fetched = [];
    for (const c of content) {
      const url = c.type === 'input_image' ? c.image_url : c.file_url;
      if (!url || !url.startsWith('/runs/')) continue;
      const headers = process.env.AGENTD_API_KEY ? { Authorization: `Bearer ${process.env.AGENTD_API_KEY}` } : {};
      const res = await fetch(base + url, { headers });
      fetched.push({ status: res.status, type: res.headers.get('content-type'), size: (await res.arrayBuffer()).byteLength });
    }
    return { status: r.status, output_text: r.output_text, content, fetched };
  },
  // conversations: a conversation made with the Conversations API, two
  // responses in it, its items, its metadata, and its delete.
  async conversations() {
    const c = await client.conversations.create({ metadata: { topic: 'demo' } });
    const a = await client.responses.create({ model: 'fake', conversation: c.id, input: '/say First answer.' });
    const b = await client.responses.create({ model: 'fake', conversation: { id: c.id }, input: '/say Second answer.' });
    const items = [];
    for await (const it of client.conversations.items.list(c.id, { order: 'asc', limit: 2 })) items.push(it);
    const one = await client.conversations.items.retrieve(items[1].id, { conversation_id: c.id });
    const updated = await client.conversations.update(c.id, { metadata: { topic: 'changed' } });
    const got = await client.conversations.retrieve(c.id);
    const del = await client.conversations.delete(c.id);
    let after = null;
    try {
      await client.conversations.retrieve(c.id);
    } catch (err) {
      after = failure(err);
    }
    let seeded = null;
    try {
      await client.conversations.create({ items: [{ type: 'message', role: 'user',
        content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] }] });
    } catch (err) {
      seeded = failure(err);
    }
    return { id: c.id, object: c.object, metadata: c.metadata, a: { status: a.status, conversation: a.conversation },
      b: b.output_text, items: items.map((i) => ({ id: i.id, type: i.type, role: i.role, text: i.content?.[0]?.text })),
      one: { id: one.id, role: one.role }, updated: updated.metadata, got: got.metadata, deleted: del, after, seeded };
  },
  // mcp: agentd's own tools offered as an mcp tool (server_label agentd):
  // the call runs inside the response, as an mcp_call item.
  async mcp() {
    const tools = [{ type: 'mcp', server_label: 'agentd', allowed_tools: ['calculator'], require_approval: 'never' }];
    const input = '/call calculator {"expression":"6*7"}\n/say The answer is 42.';
    const r = await client.responses.create({ model: 'fake', tools, input });
    const s = await client.responses.create({ model: 'fake', tools, input, stream: true });
    const ev = await events(s);
    let unknown = null;
    try {
      await client.responses.create({ model: 'fake', input, tools: [{ type: 'mcp', server_label: 'nowhere' }] });
    } catch (err) {
      unknown = failure(err);
    }
    return { status: r.status, output_text: r.output_text,
      items: r.output.map((i) => ({ type: i.type, name: i.name, server_label: i.server_label, output: i.output, status: i.status })),
      types: ev.types, text: ev.text, unknown };
  },
  // approvals: agentd's calculator offered as an mcp tool that needs the
  // client's approval (require_approval's default): the response ends at an
  // mcp_approval_request; a continuation that does not decide it is
  // refused; an approval runs the call in the next response, a rejection
  // tells the model.
  async approvals() {
    const tools = [{ type: 'mcp', server_label: 'agentd', allowed_tools: ['calculator'] }];
    const input = '/call calculator {"expression":"6*7"}\n/say The answer is 42.';
    const view = (r) => ({ id: r.id, status: r.status, output_text: r.output_text,
      items: r.output.map((i) => ({ type: i.type, id: i.id, name: i.name, server_label: i.server_label, arguments: i.arguments,
        output: i.output, error: i.error, status: i.status })) });
    const a = await client.responses.create({ model: 'fake', tools, input });
    const request = a.output.find((i) => i.type === 'mcp_approval_request');
    let undecided = null;
    try {
      await client.responses.create({ model: 'fake', tools, previous_response_id: a.id, input: 'go on' });
    } catch (err) {
      undecided = failure(err);
    }
    const s = await client.responses.create({ model: 'fake', tools, previous_response_id: a.id, stream: true,
      input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }] });
    const ev = await events(s);
    const b = await client.responses.retrieve(ev.final.id);
    const items = await client.responses.inputItems.list(b.id);
    let twice = null;
    try {
      await client.responses.create({ model: 'fake', tools, previous_response_id: b.id,
        input: [{ type: 'mcp_approval_response', approval_request_id: request.id, approve: true }] });
    } catch (err) {
      twice = failure(err);
    }
    const c = await client.responses.create({ model: 'fake', tools, input });
    const d = await client.responses.create({ model: 'fake', tools, previous_response_id: c.id,
      input: [{ type: 'mcp_approval_response', approval_request_id: c.output[0].id, approve: false, reason: 'not today' }] });
    return { a: view(a), undecided, b: view(b), types: ev.types, text: ev.text,
      items: items.data.map((i) => ({ type: i.type, approval_request_id: i.approval_request_id, approve: i.approve })),
      twice, c: view(c), d: view(d) };
  },
  // toolchoice: tool_choice and parallel_tool_calls reach the model (the
  // fake's /sampling answers what it was sent); a forced call holds for
  // the first model answer only.
  async toolchoice() {
    const weather = { type: 'function', name: 'get_weather', parameters: { type: 'object' }, strict: false };
    const mcp = { type: 'mcp', server_label: 'agentd', allowed_tools: ['calculator'], require_approval: 'never' };
    const a = await client.responses.create({ model: 'fake', tools: [weather], tool_choice: 'required',
      parallel_tool_calls: false, input: '/sampling' });
    const b = await client.responses.create({ model: 'fake', tools: [weather], input: '/sampling',
      tool_choice: { type: 'function', name: 'get_weather' } });
    const c = await client.responses.create({ model: 'fake', tools: [mcp], input: '/call calculator {"expression":"1+1"}\n/sampling',
      tool_choice: { type: 'mcp', server_label: 'agentd', name: 'calculator' } });
    let unknown = null;
    try {
      await client.responses.create({ model: 'fake', tools: [weather], input: 'x', tool_choice: { type: 'function', name: 'nope' } });
    } catch (err) {
      unknown = failure(err);
    }
    return { a: { text: a.output_text, tool_choice: a.tool_choice, parallel_tool_calls: a.parallel_tool_calls },
      b: { text: b.output_text, tool_choice: b.tool_choice }, c: { text: c.output_text, status: c.status }, unknown };
  },
  // unstored: responses with store: false, waited for and streamed, are
  // answered and then gone; one cannot continue a conversation.
  async unstored() {
    const gone = async (id) => {
      try {
        await client.responses.retrieve(id);
        return null;
      } catch (err) {
        return failure(err);
      }
    };
    const r = await client.responses.create({ model: 'fake', input: '/say Not kept.', store: false });
    const s = await client.responses.create({ model: 'fake', input: '/say Streamed, not kept.', store: false, stream: true });
    const ev = await events(s);
    let chained = null;
    try {
      const a = await client.responses.create({ model: 'fake', input: 'kept' });
      await client.responses.create({ model: 'fake', input: 'x', store: false, previous_response_id: a.id });
    } catch (err) {
      chained = failure(err);
    }
    let background = null;
    try {
      await client.responses.create({ model: 'fake', input: 'x', store: false, background: true });
    } catch (err) {
      background = failure(err);
    }
    return { id: r.id, status: r.status, store: r.store, output_text: r.output_text, after: await gone(r.id),
      stream: { id: ev.final?.id, status: ev.final?.status, store: ev.final?.store, text: ev.text },
      streamAfter: await gone(ev.final?.id), chained, background };
  },
  // remove: delete a response, then retrieve it.
  async remove() {
    const r = await client.responses.create({ model: 'fake', input: 'to be deleted' });
    const del = await client.responses.delete(r.id);
    let after = null;
    try {
      await client.responses.retrieve(r.id);
    } catch (err) {
      after = failure(err);
    }
    return { id: r.id, deleted: del ?? null, after };
  },
  // errors: what the SDK raises for bad requests.
  async errors() {
    const out = {};
    const tries = {
      unknownField: () => client.responses.create({ model: 'fake', input: 'x', bogus: true }),
      badTemperature: () => client.responses.create({ model: 'fake', input: 'x', temperature: 9 }),
      image: () => client.responses.create({ model: 'fake',
        input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,***', detail: 'auto' }] }] }),
      missing: () => client.responses.retrieve('resp_00000000000000000000000000000000'),
    };
    for (const [name, f] of Object.entries(tries)) {
      try {
        await f();
        out[name] = null;
      } catch (err) {
        out[name] = failure(err);
      }
    }
    return out;
  },
};

const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
try {
  console.log(JSON.stringify(await run(args)));
} catch (err) {
  console.log(JSON.stringify({ error: failure(err) }));
}
