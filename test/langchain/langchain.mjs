// LangChain's ChatOpenAI (@langchain/openai, with useResponsesApi: true,
// on OpenAI's Responses API) against agentd's /v1, with no code of
// agentd's: the Go test TestLangChainOpenAI runs this once and checks what
// it prints (one JSON object, a key per scenario).
//
//   node langchain.mjs BASE_URL [SCENARIO...]
//
// Scenarios (all of them when none is named):
//   invoke     model.invoke with a system and a user message
//   stream     model.stream: the chunks' text, concatenated
//   tools      bindTools with a zod tool: the model's tool call, the
//              tool run by the script, its ToolMessage sent back, the answer;
//              then a second round trip in the same conversation
//   reasoning  ChatOpenAI with reasoning: {effort: 'low'} (model gpt-5-mini)
//
// Every scenario prints its result or its error, and `requests`: what
// LangChain sent (method, path, body) and what agentd answered (status,
// and the body of an error).
import { HumanMessage, SystemMessage, ToolMessage } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
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

const chat = (fields = {}) => new ChatOpenAI({ model: 'fake', useResponsesApi: true, apiKey: process.env.AGENTD_API_KEY || 'local',
  maxRetries: 0, configuration: { baseURL: base + '/v1', fetch: recordingFetch }, ...fields });

function failure(err) {
  return { name: err?.name ?? null, message: err?.message ?? String(err), status: err?.status ?? null,
    error: err?.error ?? null, cause: err?.cause ? failure(err.cause) : null };
}

const message = (m) => ({ text: m.text, toolCalls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.name, args: c.args })),
  responseId: m.response_metadata?.id ?? m.id ?? null, usage: m.usage_metadata ?? null });

const executed = [];
const weather = tool(async ({ city }) => {
  executed.push(city);
  return `It is sunny in ${city}, 21 C.`;
}, { name: 'get_weather', description: 'The weather in a city.', schema: z.object({ city: z.string() }) });

const scenarios = {
  async invoke() {
    const m = await chat().invoke([new SystemMessage('Be brief.'), new HumanMessage('/say Hello from agentd.')]);
    return message(m);
  },

  async stream() {
    let text = '';
    let chunks = 0;
    for await (const c of await chat().stream('/say Streamed through LangChain.\n/stream 5 5')) {
      if (c.text) {
        text += c.text;
        chunks++;
      }
    }
    return { text, chunks };
  },

  async tools() {
    const model = chat().bindTools([weather]);
    const history = [new HumanMessage('/call get_weather {"city":"Paris"}\n/say It is sunny in Paris.')];
    const rounds = [];
    for (const next of [null, '/call get_weather {"city":"Oslo"}\n/say And sunny in Oslo.']) {
      if (next) history.push(new HumanMessage(next));
      const call = await model.invoke(history);
      history.push(call);
      for (const c of call.tool_calls ?? []) history.push(await weather.invoke(c));
      const answer = await model.invoke(history);
      history.push(answer);
      rounds.push({ call: message(call), answer: message(answer) });
    }
    return { rounds, executed: executed.splice(0), toolMessages: history.filter((m) => m instanceof ToolMessage).length };
  },

  async reasoning() {
    // LangChain sends reasoning only for a model it knows reasons (o*,
    // gpt-5*); agentd's fake model answers for any model name.
    const m = await chat({ model: 'gpt-5-mini', reasoning: { effort: 'low' } }).invoke('/say Thought it through.');
    return message(m);
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
