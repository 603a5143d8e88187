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
