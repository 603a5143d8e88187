// The OpenAI Agents SDK (@openai/agents, on OpenAI's Responses API)
// against agentd's /v1, with no code of agentd's: the Go test
// TestOpenAIAgentsSDK runs this once and checks what it prints (one JSON
// object, a key per scenario).
//
//   node agents.mjs BASE_URL [SCENARIO...]
//
// The SDK talks to agentd through an OpenAI client whose baseURL is
// agentd's /v1 (setDefaultOpenAIClient), as a user points the SDK at any
// Responses server. Each prompt is written for agentd's fake model: /call
// makes it call a tool, /say is its answer (docs/fake-model.md).
//
// Scenarios (all of them when none is named):
//   defaults      an Agent with no model: the SDK's default model (a gpt-5
//                 one) with its default settings (reasoning, verbosity)
//   tool          run() with a function tool: the model calls it, the SDK
//                 runs it and sends its output, the model answers
//   stream        the same, streamed (run(..., {stream: true}))
//   handoff       a triage agent hands off to another, which answers
//   previous      two runs, the second with previousResponseId of the first
//   session       two runs with one OpenAIConversationsSession
//   mcp           a hosted MCP tool (server_label agentd: agentd's own
//                 tools) whose call waits for approval, given by onApproval
//   mcpChained    the same in a run given previousResponseId
//   reasoning     modelSettings.reasoning
//   output        outputType: a zod schema the answer is parsed into
//
// Every scenario prints its result or its error, and `requests`: what the
// SDK sent (method, path, body) and what agentd answered (status, and the
// body of an error).
import { Agent, OpenAIConversationsSession, handoff, hostedMcpTool, run, setDefaultOpenAIClient, setOpenAIAPI,
  setTracingDisabled, tool } from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';

const [base, ...only] = process.argv.slice(2);

let requests = [];
async function recordingFetch(url, init = {}) {
  const rec = { method: init.method ?? 'GET', path: new URL(url).pathname, body: null, status: 0, error: null };
  try {
    rec.body = typeof init.body === 'string' ? JSON.parse(init.body) : null;
  } catch {
    rec.body = init.body ?? null;
  }
  requests.push(rec);
  const res = await fetch(url, init);
  rec.status = res.status;
  if (!res.ok) {
    const text = await res.clone().text();
    try {
      rec.error = JSON.parse(text);
    } catch {
      rec.error = text;
    }
  }
  return res;
}

const client = new OpenAI({ baseURL: base + '/v1', apiKey: process.env.AGENTD_API_KEY || 'local', fetch: recordingFetch,
  maxRetries: 0 });
setDefaultOpenAIClient(client);
setOpenAIAPI('responses');
setTracingDisabled(true);

function failure(err) {
  return { name: err?.name ?? null, message: err?.message ?? String(err), status: err?.status ?? null,
    error: err?.error ?? null, cause: err?.cause ? failure(err.cause) : null };
}

// items is what a run produced, in order, as the SDK names them.
const items = (r) => r.newItems.map((i) => {
  const raw = i.rawItem ?? {};
  return { type: i.type, agent: i.agent?.name ?? null, name: raw.name ?? null, arguments: raw.arguments ?? null,
    output: typeof raw.output === 'string' ? raw.output : raw.output?.text ?? null, status: raw.status ?? null };
});

const summary = (r) => ({ finalOutput: r.finalOutput ?? null, lastAgent: r.lastAgent?.name ?? null,
  lastResponseId: r.lastResponseId ?? null, responseIds: r.rawResponses.map((x) => x.responseId ?? null), items: items(r) });

const calls = [];
const weather = tool({
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: z.object({ city: z.string() }),
  async execute({ city }) {
    calls.push(city);
    return `It is sunny in ${city}, 21 C.`;
  },
});

const scenarios = {
  // defaults: an Agent as the SDK's quickstart writes it, with no model:
  // the SDK's default model and its default settings.
  async defaults() {
    const agent = new Agent({ name: 'Assistant', instructions: 'You are a helpful assistant.' });
    const r = await run(agent, '/say Hello from the default model.');
    return summary(r);
  },

  async tool() {
    const agent = new Agent({ name: 'Assistant', instructions: 'Answer with the weather.', model: 'fake', tools: [weather] });
    const r = await run(agent, '/call get_weather {"city":"Paris"}\n/say It is sunny in Paris.');
    return { ...summary(r), executed: calls.splice(0) };
  },

  async stream() {
    const agent = new Agent({ name: 'Assistant', instructions: 'Answer with the weather.', model: 'fake', tools: [weather] });
    const r = await run(agent, '/call get_weather {"city":"Oslo"}\n/say Sunny in Oslo, streamed.\n/stream 4 5', { stream: true });
    let deltas = '';
    const events = {};
    for await (const ev of r) {
      events[ev.type] = (events[ev.type] ?? 0) + 1;
      if (ev.type === 'raw_model_stream_event' && ev.data.type === 'output_text_delta') deltas += ev.data.delta;
    }
    await r.completed;
    return { ...summary(r), executed: calls.splice(0), deltas, events };
  },

  async handoff() {
    const billing = new Agent({ name: 'Billing', instructions: 'You answer billing questions.', model: 'fake',
      handoffDescription: 'Questions about invoices.' });
    const triage = new Agent({ name: 'Triage', instructions: 'Hand billing questions to Billing.', model: 'fake',
      handoffs: [handoff(billing)] });
    const r = await run(triage, '/call transfer_to_Billing {}\n/say Billing here: your invoice is paid.');
    return summary(r);
  },

  async previous() {
    const agent = new Agent({ name: 'Assistant', instructions: 'Be brief.', model: 'fake', tools: [weather] });
    const a = await run(agent, '/call get_weather {"city":"Rome"}\n/say First turn done.');
    const b = await run(agent, '/call get_weather {"city":"Lima"}\n/say Second turn done.', { previousResponseId: a.lastResponseId });
    return { first: summary(a), second: summary(b), executed: calls.splice(0) };
  },

  async session() {
    const session = new OpenAIConversationsSession({ client });
    const agent = new Agent({ name: 'Assistant', instructions: 'Be brief.', model: 'fake', tools: [weather] });
    const a = await run(agent, '/call get_weather {"city":"Kyoto"}\n/say Kyoto is sunny.', { session });
    const b = await run(agent, '/say Second turn in the session.', { session });
    const history = await session.getItems();
    return { conversationId: await session.getSessionId(), first: summary(a), second: summary(b), executed: calls.splice(0),
      history: history.map((i) => ({ type: i.type ?? 'message', role: i.role ?? null, name: i.name ?? null })) };
  },

  async mcp() {
    const approvals = [];
    const agent = new Agent({ name: 'Calculator', instructions: 'Use the calculator.', model: 'fake', tools: [
      hostedMcpTool({ serverLabel: 'agentd', allowedTools: ['calculator'], requireApproval: 'always',
        onApproval: async (_ctx, item) => {
          approvals.push({ name: item.rawItem?.name ?? null, arguments: item.rawItem?.arguments ?? null,
            providerData: item.rawItem?.providerData ?? null });
          return { approve: true };
        } }),
    ] });
    const r = await run(agent, '/call calculator {"expression":"6*7"}\n/say The answer is 42.');
    return { ...summary(r), approvals, interruptions: (r.interruptions ?? []).length };
  },

  // mcpChained: the same, in a run that continues an earlier response
  // (previousResponseId), where the SDK sends only the new items.
  async mcpChained() {
    const approvals = [];
    const agent = new Agent({ name: 'Calculator', instructions: 'Use the calculator.', model: 'fake', tools: [
      hostedMcpTool({ serverLabel: 'agentd', allowedTools: ['calculator'], requireApproval: 'always',
        onApproval: async (_ctx, item) => {
          approvals.push({ name: item.rawItem?.name ?? null, arguments: item.rawItem?.arguments ?? null });
          return { approve: true };
        } }),
    ] });
    const a = await run(agent, '/say Ready.');
    const r = await run(agent, '/call calculator {"expression":"6*7"}\n/say The answer is 42.', { previousResponseId: a.lastResponseId });
    return { ...summary(r), approvals };
  },

  async reasoning() {
    const agent = new Agent({ name: 'Thinker', instructions: 'Think, then answer.', model: 'fake',
      modelSettings: { reasoning: { effort: 'low', summary: 'auto' } } });
    const r = await run(agent, '/say Thought it through.');
    return summary(r);
  },

  async output() {
    const agent = new Agent({ name: 'Forecaster', instructions: 'Answer in JSON.', model: 'fake',
      outputType: z.object({ city: z.string(), celsius: z.number() }) });
    const r = await run(agent, '/say {"city":"Paris","celsius":21}');
    return summary(r);
  },
};

const out = {};
for (const name of only.length ? only : Object.keys(scenarios)) {
  requests = [];
  try {
    out[name] = await scenarios[name]();
  } catch (err) {
    out[name] = { error: failure(err) };
  }
  out[name].requests = requests;
}
process.stdout.write(JSON.stringify(out) + '\n');
