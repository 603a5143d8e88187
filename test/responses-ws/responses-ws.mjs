// OpenAI's Node.js SDK's WebSocket client of the Responses API
// (openai/resources/responses/ws, over the ws package) against agentd's
// GET /v1/responses, with no code of agentd's: the Go test
// TestResponsesWebSocketNodeSDK runs this and checks what it prints (one
// JSON object).
//
//   node responses-ws.mjs BASE_URL
import OpenAI from 'openai';
import { ResponsesWS } from 'openai/resources/responses/ws';

const [base] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: process.env.AGENTD_API_KEY || 'local', maxRetries: 2 });

const terminal = (t) => t === 'response.completed' || t === 'response.incomplete' || t === 'response.failed';

// socket opens a ResponsesWS whose server events (error events included)
// queue up for next().
function socket() {
  const rws = new ResponsesWS(client);
  const queue = [];
  const waiting = [];
  const push = (ev) => (waiting.length ? waiting.shift()(ev) : queue.push(ev));
  rws.on('event', push);
  rws.on('error', () => {}); // error events come through 'event' too
  rws.on('close', () => push({ type: '(closed)' }));
  rws.next = (ms = 20000) =>
    queue.length
      ? Promise.resolve(queue.shift())
      : new Promise((resolve, reject) => {
          const t = setTimeout(() => reject(new Error('no event within ' + ms + ' ms')), ms);
          waiting.push((ev) => { clearTimeout(t); resolve(ev); });
        });
  // until reads events until one that pred accepts; it returns them all.
  rws.until = async (pred) => {
    const evs = [];
    for (;;) {
      const ev = await rws.next();
      evs.push(ev);
      if (ev.type === '(closed)') throw new Error('socket closed: ' + JSON.stringify(evs.slice(-3)));
      if (pred(ev)) return evs;
    }
  };
  return rws;
}

const text = (resp) => resp.output.flatMap((it) => (it.content ?? []).map((c) => c.text)).join('|');

// multiplex: two responses on two lanes of one socket, then a chained one.
async function multiplex(rws) {
  rws.send({ type: 'response.create', stream_id: 'a', model: 'fake', input: '/stream 8 100\n/say alpha beta gamma delta' });
  rws.send({ type: 'response.create', stream_id: 'b', model: 'fake', input: '/stream 8 100\n/say one two three four' });
  const lanes = { a: { seqs: [] }, b: { seqs: [] } };
  const order = [];
  let ended = 0;
  await rws.until((ev) => {
    lanes[ev.stream_id].seqs.push(ev.sequence_number);
    order.push(ev.stream_id);
    if (terminal(ev.type)) {
      lanes[ev.stream_id].text = text(ev.response);
      lanes[ev.stream_id].id = ev.response.id;
      ended++;
    }
    return ended === 2;
  });
  rws.send({ type: 'response.create', stream_id: 'a', model: 'fake', previous_response_id: lanes.a.id, input: '/say chained' });
  const evs = await rws.until((ev) => terminal(ev.type));
  const last = evs.at(-1).response;
  return { lanes, order: order.join(''), chained: { text: text(last), previous_response_id: last.previous_response_id } };
}

// steer: a response.steer while the answer streams.
async function steer(rws) {
  rws.send({ type: 'response.create', model: 'fake', input: '/stream 20 50' });
  const first = await rws.until((ev) => ev.type === 'response.output_text.delta');
  const id = first[0].response.id;
  rws.send({ type: 'response.steer', previous_response_id: id, input: '/say steered' });
  const evs = await rws.until((ev) => terminal(ev.type));
  const accepted = evs.find((ev) => ev.type === 'response.steer.accepted');
  const final = evs.at(-1).response;
  return { id, accepted: accepted?.steer ?? null, status: final.status, text: text(final) };
}

// cut: a socket closed mid-answer; the response resumed with
// starting_after over HTTP (the SDK's retrieve) and over a new socket.
async function cut() {
  const rws = socket();
  rws.send({ type: 'response.create', model: 'fake', input: '/stream 20 60' });
  let id, last, deltas = 0;
  await rws.until((ev) => {
    if (ev.type === 'response.created') id = ev.response.id;
    if (ev.type === 'response.output_text.delta') deltas++;
    last = ev.sequence_number;
    return deltas === 3;
  });
  rws.close({ code: 1000, reason: 'gone' });
  const http = { seqs: [], text: '' };
  for await (const ev of await client.responses.retrieve(id, { stream: true, starting_after: last })) {
    http.seqs.push(ev.sequence_number);
    if (terminal(ev.type)) http.text = text(ev.response);
  }
  const again = socket();
  again.send({ type: 'response.retrieve', response_id: id, starting_after: last });
  const evs = await again.until((ev) => terminal(ev.type));
  again.close();
  return { last, http, socket: { seqs: evs.map((ev) => ev.sequence_number), text: text(evs.at(-1).response) } };
}

// bad: messages agentd refuses, each with an error event; the socket goes on.
async function bad(rws) {
  const out = [];
  rws.send({ type: 'response.create', model: 'fake', input: 'x', stream: false });
  out.push((await rws.next()));
  rws.sendRaw('not json');
  out.push((await rws.next()));
  rws.send({ type: 'response.create', model: 'fake', input: '/say fine', store: false });
  const evs = await rws.until((ev) => terminal(ev.type));
  return { errors: out.map((ev) => ({ type: ev.type, status: ev.status, param: ev.error?.param ?? null, code: ev.error?.code ?? null })),
    after: text(evs.at(-1).response) };
}

try {
  const rws = socket();
  const result = { multiplex: await multiplex(rws), steer: await steer(rws), bad: await bad(rws), cut: await cut() };
  rws.close();
  console.log(JSON.stringify(result));
  process.exit(0);
} catch (err) {
  console.log(JSON.stringify({ error: String(err?.stack ?? err) }));
  process.exit(0);
}
