// A webhook endpoint as a Node.js user writes one: it verifies each
// delivery with the standardwebhooks package under the secret in
// WEBHOOK_SECRET, answers 500 to the first FAIL_FIRST attempts of each
// webhook-id and 204 after, and prints one JSON line per request that
// verified ({"id", "type", "run_id", "status", "answered"}), or
// {"error"} for one that did not. Its first line is {"port"}.
import http from 'node:http';
import { Webhook } from 'standardwebhooks';

const wh = new Webhook(process.env.WEBHOOK_SECRET);
const failFirst = Number(process.env.FAIL_FIRST || 0);
const seen = new Map();

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString();
    let event;
    try {
      event = wh.verify(body, req.headers);
    } catch (err) {
      console.log(JSON.stringify({ error: String(err) }));
      res.writeHead(401).end();
      return;
    }
    const id = req.headers['webhook-id'];
    const n = (seen.get(id) || 0) + 1;
    seen.set(id, n);
    const answered = n <= failFirst ? 500 : 204;
    console.log(JSON.stringify({ id, type: event.type, run_id: event.data.run.id, status: event.data.run.status, answered }));
    res.writeHead(answered).end();
  });
});
server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: server.address().port })));
