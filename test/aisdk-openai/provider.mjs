// The AI SDK's OpenAI provider (@ai-sdk/openai, on OpenAI's Responses API)
// against agentd's /v1, with no code of agentd's: the Go tests
// TestAISDKOpenAIProvider* run one scenario at a time and check what this
// prints (one JSON object).
//
//   node provider.mjs BASE_URL SCENARIO [PROMPT]
//
// Scenarios:
//   generate  generateText with openai.responses('fake'), then the same
//             prompt through the default openai('fake'); print the text,
//             finish reason, usage, the response's id and the provider
//             metadata's responseId, and the path each call posted to
//   stream    streamText; print the text deltas joined, their count, the
//             finish reason and the final text
//   tool      generateText with a weather tool (tool() with execute) and
//             stopWhen: stepCountIs(3); print each step's tool calls, tool
//             results and text, and the final text
//   history   a second turn after a first, sent four ways (see below)
//   steps     a tool over three steps, each continuing the previous
//             step's response (previousResponseId)
//   storeFalse  the same with store: false, the history sent inline
//   continued a second turn with previousResponseId of a first, over
//             three steps of a tool (the same id sent with each step)
//   reasoning generateText with reasoningEffort 'low' (model gpt-5-mini)
//   options   generateText with a system prompt, temperature, topP,
//             maxOutputTokens, metadata and user; print the text
//
// Every output carries `requests`: what the provider sent (method, path,
// body) and what agentd answered (status, and the body of an error).
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const [base, scenario, promptArg] = process.argv.slice(2);

// requests records each call the provider makes.
const requests = [];
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

const openai = createOpenAI({ baseURL: base + '/v1', apiKey: process.env.AGENTD_API_KEY || 'local', fetch: recordingFetch });

// failure is what an AI SDK error says (APICallError carries the status and
// the body agentd answered).
function failure(err) {
  return { name: err?.name ?? null, message: err?.message ?? String(err), statusCode: err?.statusCode ?? null,
    responseBody: err?.responseBody ?? null, url: err?.url ?? null, cause: err?.cause ? failure(err.cause) : null };
}

const steps = (r) => r.steps.map((s) => ({
  finishReason: s.finishReason,
  text: s.text,
  responseId: s.response?.id ?? null,
  toolCalls: s.toolCalls.map((c) => ({ toolCallId: c.toolCallId, toolName: c.toolName, input: c.input })),
  toolResults: s.toolResults.map((c) => ({ toolCallId: c.toolCallId, toolName: c.toolName, input: c.input, output: c.output })),
}));

const scenarios = {
  async generate(prompt = '/say Hello from agentd.') {
    const r = await generateText({ model: openai.responses('fake'), prompt, maxRetries: 0 });
    const first = requests.length;
    const d = await generateText({ model: openai('fake'), prompt, maxRetries: 0 });
    return {
      text: r.text, finishReason: r.finishReason, rawFinishReason: r.rawFinishReason ?? null, usage: r.usage,
      responseId: r.response.id, modelId: r.response.modelId,
      providerResponseId: r.providerMetadata?.openai?.responseId ?? null, warnings: r.warnings ?? [],
      default: { text: d.text, finishReason: d.finishReason, responseId: d.response.id,
        paths: requests.slice(first).map((q) => q.path) },
    };
  },
  async stream(prompt = '/say Streamed by agentd through the AI SDK.\n/stream 6 10') {
    const errors = [];
    const r = streamText({ model: openai.responses('fake'), prompt, maxRetries: 0, onError: ({ error }) => errors.push(failure(error)) });
    let deltas = '';
    let chunks = 0;
    const types = [];
    for await (const part of r.fullStream) {
      if (types[types.length - 1] !== part.type) types.push(part.type);
      if (part.type === 'text-delta') {
        deltas += part.text;
        chunks++;
      }
      if (part.type === 'error') errors.push(failure(part.error));
    }
    if (errors.length) return { error: errors[0], errors };
    const response = await r.response;
    return {
      deltas, chunks, types, finishReason: await r.finishReason, text: await r.text, usage: await r.usage,
      responseId: response.id, providerResponseId: (await r.providerMetadata)?.openai?.responseId ?? null,
    };
  },
  async tool(prompt = '/call weather {"city":"Paris"}\n/say It is sunny.') {
    const executed = [];
    const weather = tool({
      description: 'The weather in a city.',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        executed.push(city);
        return { city, forecast: 'sunny', celsius: 21 };
      },
    });
    const r = await generateText({ model: openai.responses('fake'), prompt, tools: { weather }, stopWhen: stepCountIs(3), maxRetries: 0 });
    return { text: r.text, finishReason: r.finishReason, executed, steps: steps(r) };
  },
  // steps: a tool over three steps (a call, a second call, the answer).
  // Each step after the first continues the previous step's response
  // (previousResponseId, set by prepareStep) and sends only the tool's
  // new result; with store: false (the scenario's PROMPT after "store:
  // false" in the Go test: storeFalse), every step sends the whole
  // history inline instead. Prints what steps prints, with each
  // request's previous_response_id.
  async steps(prompt = '/call weather {"city":"Paris"}\n/next\n/call weather {"city":"Oslo"}\n/say Sunny in both.', store = true) {
    const executed = [];
    const weather = tool({
      description: 'The weather in a city.',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        executed.push(city);
        return { city, forecast: 'sunny', celsius: 21 };
      },
    });
    const prepareStep = ({ steps, messages }) => {
      if (!store || steps.length === 0) return {};
      return { messages: messages.slice(-1),
        providerOptions: { openai: { previousResponseId: steps.at(-1).providerMetadata?.openai?.responseId } } };
    };
    const r = await generateText({ model: openai.responses('fake'), prompt, tools: { weather }, stopWhen: stepCountIs(5),
      prepareStep, providerOptions: store ? {} : { openai: { store: false } }, maxRetries: 0 });
    return { text: r.text, finishReason: r.finishReason, executed, steps: steps(r),
      previous: requests.map((q) => q.body?.previous_response_id ?? null) };
  },
  // continued: a second turn given previousResponseId of a first, as a
  // chat passes it, over three steps of a tool: the provider sends that
  // same id with every step (and the steps' calls and results as input).
  async continued(prompt = '/call weather {"city":"Paris"}\n/next\n/call weather {"city":"Oslo"}\n/say Sunny in both.') {
    const first = await generateText({ model: openai.responses('fake'), prompt: '/say First turn.', maxRetries: 0 });
    const executed = [];
    const weather = tool({
      description: 'The weather in a city.',
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => {
        executed.push(city);
        return { city, forecast: 'sunny', celsius: 21 };
      },
    });
    const r = await generateText({ model: openai.responses('fake'), prompt, tools: { weather }, stopWhen: stepCountIs(5),
      providerOptions: { openai: { previousResponseId: first.providerMetadata?.openai?.responseId } }, maxRetries: 0 });
    return { first: first.text, firstResponseId: first.response.id, text: r.text, finishReason: r.finishReason, executed,
      steps: steps(r), previous: requests.map((q) => q.body?.previous_response_id ?? null) };
  },
  async storeFalse(prompt) {
    return scenarios.steps(prompt, false);
  },
  // reasoning: reasoningEffort, on a model the provider knows reasons
  // (agentd's fake model answers for any model name).
  async reasoning(prompt = '/say Thought it through.') {
    const r = await generateText({ model: openai.responses('gpt-5-mini'), prompt, maxRetries: 0,
      providerOptions: { openai: { reasoningEffort: 'low' } } });
    return { text: r.text, finishReason: r.finishReason, responseId: r.response.id, warnings: r.warnings ?? [] };
  },
  // history: a second turn after a first, in the ways a chat can send it:
  // reference, the first turn's messages sent back (result.response.messages,
  // whose assistant text the provider sends as an item_reference to the
  // stored item); plain, the assistant's text without its item id;
  // storeFalse, the response messages with store: false (sent inline);
  // previous, only the new message with previousResponseId. Each prints
  // the second text or its error.
  async history(prompt = '/say First answer.') {
    const model = openai.responses('fake');
    const second = '/say Second answer.';
    const turn = async (first, messages, providerOptions) => {
      const at = requests.length;
      try {
        const b = await generateText({ model, messages, providerOptions, maxRetries: 0 });
        return { text: b.text, finishReason: b.finishReason, input: requests[at]?.body?.input };
      } catch (err) {
        return { error: failure(err), input: requests[at]?.body?.input };
      }
    };
    const a = await generateText({ model, prompt, maxRetries: 0 });
    const user = (content) => ({ role: 'user', content });
    return {
      first: a.text,
      reference: await turn(a, [user(prompt), ...a.response.messages, user(second)]),
      plain: await turn(a, [user(prompt), { role: 'assistant', content: a.text }, user(second)]),
      storeFalse: await turn(a, [user(prompt), ...a.response.messages, user(second)], { openai: { store: false } }),
      previous: await turn(a, [user(second)], { openai: { previousResponseId: a.providerMetadata?.openai?.responseId } }),
    };
  },
  // options: a system prompt and the common settings.
  async options(prompt = '/sampling') {
    const r = await generateText({ model: openai.responses('fake'), system: 'Be brief.', prompt, temperature: 0.5, topP: 0.9,
      maxOutputTokens: 100, maxRetries: 0, providerOptions: { openai: { metadata: { k: 'v' }, user: 'u1' } } });
    return { text: r.text, finishReason: r.finishReason, warnings: r.warnings ?? [] };
  },
};

const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
let out;
try {
  out = await run(promptArg || undefined);
} catch (err) {
  out = { error: failure(err) };
}
console.log(JSON.stringify({ ...out, requests }));
