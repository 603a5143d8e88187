// The viewer's common parts: calls of the API with the key the person
// typed (kept in this tab's session storage), and building elements.

// headers are a request's headers with the key the person typed, if any.
export function headers(extra = {}) {
  const h = { ...extra };
  const key = sessionStorage.getItem("agentd-key");
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

// api calls the API; a refusal throws an Error whose message is the
// problem's code and detail, with the problem itself (status, code,
// detail, field, ...) as its problem.
export async function api(path, options = {}) {
  const res = await fetch(path, { ...options, headers: headers(options.headers) });
  if (res.status === 204) return null;
  const body = await res.json().catch(() => null);
  if (!res.ok) {
    const msg = body && body.detail ? `${body.code}: ${body.detail}` : `HTTP ${res.status}`;
    const e = new Error(msg);
    e.problem = body && body.code ? body : { status: res.status };
    throw e;
  }
  return body;
}

// newKey is a fresh Idempotency-Key (crypto.randomUUID is only there in a
// secure context: on loopback or HTTPS).
export function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  return [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
}

// el builds an element: el("td", {class: "x"}, "text", child, ...).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

export const status = (s) => el("span", { class: "status " + s }, s);
export const when = (t) => (t ? new Date(t).toLocaleString() : "");
export const short = (v, n = 160) => {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s && s.length > n ? s.slice(0, n) + "…" : s;
};

// ago says how long ago time t was, in the largest unit that fits.
export function ago(t) {
  if (!t) return "";
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return `${Math.floor(s / 86400)} d ago`;
}

// money is a cost as the ledger counts it, to six decimals.
export const money = (n) => (typeof n === "number" ? String(Math.round(n * 1e6) / 1e6) : "—");

// firstLine is the first line of text s.
export const firstLine = (s) => (s || "").split("\n").find((l) => l.trim() !== "") || "";

// shortID is the start of an id, as the viewer shows one in a table.
export const shortID = (id) => (id ? id.slice(0, 8) + "…" : "");

// post sends body to path as JSON with a fresh Idempotency-Key.
export function post(path, body, method = "POST") {
  return api(path, { method, headers: { "Content-Type": "application/json", "Idempotency-Key": newKey() }, body: JSON.stringify(body) });
}
