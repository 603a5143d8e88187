// agentd's run viewer: runs, one run's timeline from its event stream, one
// conversation's messages. It uses the public API only, with the key typed
// once (kept in this tab's session storage), and follows a run's events
// with Last-Event-ID across dropped connections, as any SSE client does.
// A run's page sends messages too: input to the run while it works, or,
// once it has ended, to its conversation, which starts the next run.
// The tenant's memory has pages of its own (memory.js).

import { ago, api, el, firstLine, headers, money, newKey, post, short, shortID, status, when } from "./lib.js";
import { agentPage, agentsPage, schedulePage, schedulesPage, usagePage, webhookPage, webhooksPage } from "./console.js";
import { memoryItemPage, memoryPage } from "./memory.js";
import { evalPage, evalsPage } from "./evals.js";

const main = document.getElementById("main");
const keyInput = document.getElementById("key");
const TERMINAL = new Set(["run.completed", "run.failed", "run.cancelled", "run.timed_out", "run.interrupted"]);
// STEERABLE are the statuses of a run that takes input (agentd.Steerable).
const STEERABLE = new Set(["queued", "running", "requires_action"]);

keyInput.value = sessionStorage.getItem("agentd-key") || "";
document.getElementById("keyform").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem("agentd-key", keyInput.value.trim());
  route();
});

// inputText is an input's messages as text: each message's text parts,
// its images and files named. messages are the parts of each message (an
// input.accepted event's) or messages with content (an input's view).
function inputText(messages) {
  const part = (p) => p.type === "text" ? p.text
    : p.type === "image" ? `[image${p.filename ? " " + p.filename : p.url ? " " + p.url : ""}]`
    : p.type === "file" ? `[file ${p.filename || p.media_type || ""}]` : `[${p.type}]`;
  return (messages || []).map((m) => (Array.isArray(m) ? m : m.content || []).map(part).join("\n")).join("\n\n");
}

// arrival is what the next run page says first: why the viewer went
// there (a message sent to a conversation from the page of its last run).
let arrival = "";

// Each page sets stop to end what it started (polls, streams).
let stop = () => {};

function route() {
  stop();
  stop = () => {};
  const hash = location.hash.replace(/^#/, "") || "/";
  let m;
  if ((m = hash.match(/^\/runs\/([0-9a-f-]+)(?:\?(.*))?$/))) return runPage(m[1], new URLSearchParams(m[2] || ""));
  if ((m = hash.match(/^\/conversations\/([0-9a-f-]+)$/))) return conversationPage(m[1]);
  if ((m = hash.match(/^\/compare\/([0-9a-f-]+)\/([0-9a-f-]+)$/))) return comparePage(m[1], m[2]);
  const h = { runRow, runsHead };
  const qs = (x) => new URLSearchParams(x || "");
  if (hash === "/agents") return agentsPage(main);
  if ((m = hash.match(/^\/agents\/([^?]+)(?:\?(.*))?$/))) return agentPage(main, decodeURIComponent(m[1]), qs(m[2]), h);
  if (hash === "/schedules") return schedulesPage(main);
  if ((m = hash.match(/^\/schedules\/([0-9a-f-]+)$/))) return schedulePage(main, m[1], h);
  if (hash === "/webhooks") return webhooksPage(main);
  if ((m = hash.match(/^\/webhooks\/([0-9a-f-]+)(?:\?(.*))?$/))) return webhookPage(main, m[1], qs(m[2]));
  if ((m = hash.match(/^\/usage(?:\?(.*))?$/))) return usagePage(main, qs(m[1]));
  if ((m = hash.match(/^\/memory\/item\?(.*)$/))) return memoryItemPage(main, new URLSearchParams(m[1]));
  if ((m = hash.match(/^\/memory(?:\?(.*))?$/))) return memoryPage(main, new URLSearchParams(m[1] || ""));
  if ((m = hash.match(/^\/evals\/([0-9a-f-]+)$/))) return evalPage(main, m[1]);
  if (hash === "/evals") return evalsPage(main);
  return runsPage(new URLSearchParams(hash.split("?")[1] || ""));
}
window.addEventListener("hashchange", route);

// ---- Runs ----

// RUN_FILTERS are the filters of the runs page, as GET /runs takes them.
const RUN_FILTERS = ["status", "agent", "schedule_id", "parent_run_id", "q", "conversation_id"];

// runsPage lists the tenant's runs, newest first, 25 a page: what each was
// asked (its input's first line), its agent, status, parent, schedule, cost
// and age, filtered as q says (RUN_FILTERS, and cursor for a later page).
function runsPage(q) {
  const statusSel = el("select", { id: "filter-status", "aria-label": "status" },
    ...["", "queued", "running", "requires_action", "completed", "failed", "cancelled", "timed_out", "interrupted"]
      .map((s) => el("option", { value: s }, s || "any status")));
  statusSel.value = q.get("status") || "";
  const field = (name, placeholder, size) => el("input", { id: "filter-" + name, name, placeholder, size, value: q.get(name) || "", "aria-label": placeholder });
  const inputs = {
    q: field("q", "text in the input", 22), agent: field("agent", "agent", 12),
    schedule_id: field("schedule_id", "schedule id", 14), parent_run_id: field("parent_run_id", "parent run id", 14),
    conversation_id: field("conversation_id", "conversation id", 14),
  };
  inputs.agent.setAttribute("list", "agent-names");
  const names = el("datalist", { id: "agent-names" });
  api("/agents?limit=100").then((p) => names.replaceChildren(...p.data.map((a) => el("option", { value: a.name }))), () => {});
  const apply = (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    if (statusSel.value) p.set("status", statusSel.value);
    for (const [k, i] of Object.entries(inputs)) if (i.value.trim()) p.set(k, i.value.trim());
    location.hash = "#/?" + p.toString();
  };
  const body = el("tbody");
  const more = el("div", { class: "pager" });
  const err = el("p", { class: "error", id: "error" });
  const filtered = RUN_FILTERS.some((k) => q.get(k));
  main.replaceChildren(
    el("h1", {}, "Runs"),
    el("form", { class: "filters", id: "run-filters", onsubmit: apply }, statusSel, inputs.q, inputs.agent, inputs.schedule_id, inputs.parent_run_id,
      inputs.conversation_id, names, el("button", { type: "submit" }, "Filter"),
      filtered ? el("a", { href: "#/", id: "clear-filters" }, "clear") : null),
    err,
    el("table", { id: "runs" }, runsHead(), body),
    more);
  let shown = "";
  const load = async () => {
    const p = new URLSearchParams();
    for (const k of RUN_FILTERS) if (q.get(k)) p.set(k, q.get(k));
    if (q.get("cursor")) p.set("cursor", q.get("cursor"));
    p.set("limit", "25");
    try {
      const page = await api("/runs?" + p.toString());
      err.textContent = "";
      // Built again when the page changed (and each half minute, for the
      // ages): otherwise a link would be replaced while it is clicked.
      const key = JSON.stringify(page) + Math.floor(Date.now() / 30000);
      if (key === shown) return;
      shown = key;
      body.replaceChildren(...page.data.map(runRow));
      if (!page.data.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No runs" + (filtered ? " match these filters." : " yet."))));
      const pages = [];
      if (q.get("cursor")) {
        const n = new URLSearchParams(q);
        n.delete("cursor");
        pages.push(el("a", { href: "#/?" + n.toString(), id: "newest" }, "Newest runs"), " ");
      }
      if (page.has_more) {
        const n = new URLSearchParams(q);
        n.set("cursor", page.next_cursor);
        pages.push(el("a", { href: "#/?" + n.toString(), id: "older" }, "Older runs"));
      }
      more.replaceChildren(...pages);
    } catch (e) {
      err.textContent = e.message;
    }
  };
  load();
  const timer = setInterval(load, 3000); // live status
  stop = () => clearInterval(timer);
}

// runsHead is the head of a table of runRow rows.
const runsHead = () => el("thead", {}, el("tr", {},
  ...["Input", "Agent", "Status", "Parent", "Schedule", "Cost", "Age"].map((h) => el("th", { class: h === "Cost" ? "num" : null }, h))));

// runRow is run r's row in the runs list.
function runRow(r) {
  const input = firstLine(r.input_text);
  const link = (href, text, cls) => el("a", { href, class: cls }, text);
  return el("tr", { "data-run": r.id },
    el("td", { class: "input-cell", title: r.input_text || "" },
      link("#/runs/" + r.id, input ? short(input, 80) : "(no text)", input ? "" : "muted")),
    el("td", {}, r.agent ? link(`#/agents/${encodeURIComponent(r.agent.name)}`, `${r.agent.name} v${r.agent.version}`) : el("span", { class: "muted" }, r.model)),
    el("td", {}, runStatus(r)),
    el("td", {}, r.parent_run_id ? link("#/runs/" + r.parent_run_id, shortID(r.parent_run_id), "mono") : ""),
    el("td", {}, r.schedule_id ? link("#/schedules/" + r.schedule_id, shortID(r.schedule_id), "mono") : ""),
    el("td", { class: "num" }, money(r.cost)),
    el("td", { title: when(r.created_at) }, ago(r.created_at)));
}

// ---- One run ----

// runPage shows run id; q's step (and call, a tool call of it) is marked
// on its timeline (#/runs/{id}?step=2&call={tool_call_id}).
function runPage(id, q) {
  const summary = el("div", { class: "card summary", id: "summary" });
  const asked = el("div", { class: "card asked", id: "asked" }, el("p", { class: "muted" }, "Loading what was asked…"));
  const children = el("div", { id: "children", hidden: "" });
  const actions = el("div", { id: "actions" });
  const timeline = el("div", { id: "timeline" });
  const log = el("div", { class: "card events", id: "events" });
  const err = el("p", { class: "error", id: "error" });
  const audit = el("button", { id: "audit", onclick: () => downloadAudit(id).catch((e) => { err.textContent = e.message; }) }, "Export audit (NDJSON)");
  const came = arrival ? [el("p", { class: "note", id: "arrival" }, arrival)] : [];
  arrival = "";
  let refresh = null;
  const sender = new Sender(id, () => refresh());
  main.replaceChildren(el("h1", {}, "Run ", el("code", {}, id)), ...came, summary, asked, el("div", { class: "filters" }, audit), actions, sender.form, err,
    children, el("h2", {}, "Timeline"), timeline, el("h2", {}, "Events"), log);

  const view = new Timeline(timeline, log, { step: Number(q.get("step")) || 0, call: q.get("call") || "" });
  view.tree = new ChildTree(children, id);
  let askedOf = "";
  refresh = async () => {
    try {
      const r = await api("/runs/" + id);
      showSummary(summary, r);
      if (askedOf !== r.input_text + "\0" + r.instructions) {
        askedOf = r.input_text + "\0" + r.instructions;
        showAsked(asked, r);
      }
      showActions(actions, r, refresh);
      if (r.sub_agents.length || view.tree.nodes.size) await view.tree.load(id, 0);
      sender.update(r);
      // An input the run ended without may have gone into a later run
      // since: all its inputs say where (GET /runs/{id} lists only those
      // not carried yet).
      if (!STEERABLE.has(r.status) && view.uncarried()) view.carried((await api(`/runs/${id}/inputs`)).data);
      return r;
    } catch (e) {
      err.textContent = e.message;
    }
  };
  refresh();

  const ac = new AbortController();
  // The receipts of the calls come from the steps view, read once things
  // settle (a replay of many steps reads it once).
  let receiptTimer = null;
  const receipts = () => {
    clearTimeout(receiptTimer);
    receiptTimer = setTimeout(async () => {
      try {
        view.receipts((await api("/runs/" + id + "/steps")).data);
      } catch (e) {
        err.textContent = e.message;
      }
    }, 300);
  };
  stop = () => { ac.abort(); clearTimeout(receiptTimer); };
  follow(id, ac.signal, (ev) => {
    view.add(ev);
    // A sub-agent that starts waiting, goes on or ends changes what the
    // run waits for (its required_action), not the run's own log.
    const kid = ev.type === "agent.event" ? ev.data.type : "";
    if (kid === "run.requires_action" || kid === "run.resumed" || TERMINAL.has(kid)) refresh();
    if (ev.type === "run.requires_action" || TERMINAL.has(ev.type) || ev.type === "step.completed" || ev.type === "run.started" || ev.type.startsWith("input.")) refresh();
    if (ev.type === "run.requires_action" || TERMINAL.has(ev.type) || ev.type === "step.completed") receipts();
  }, (msg) => { err.textContent = msg; }).then(() => { refresh(); receipts(); });
}

// downloadAudit saves a run's audit export (GET /runs/{id}/audit), fetched
// with the key, as a file.
async function downloadAudit(id) {
  const res = await fetch(`/runs/${id}/audit`, { headers: headers() });
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    throw new Error(`${body.code || res.status}: ${body.detail || "the export was refused"}`);
  }
  const url = URL.createObjectURL(await res.blob());
  const a = el("a", { href: url, download: `run-${id}-audit.ndjson` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

// costText is what a run's model calls cost, with its cap, if any.
function costText(r) {
  const cost = typeof r.cost === "number" ? String(Math.round(r.cost * 1e6) / 1e6) : "—";
  return r.max_cost ? `${cost} of ${r.max_cost}` : cost;
}

// runStatus is run r's status as a person reads it: a run that waits for
// its sub-agents (and for no decision under them) is working, not waiting
// for the person.
function runStatus(r) {
  const a = r.required_action;
  if (r.status !== "requires_action" || !a || a.type !== "agent_runs") return status(r.status);
  if (childDecisions(a).length) return el("span", { class: "status requires_action", title: "a sub-agent waits for a decision" }, "requires_action");
  return el("span", { class: "status running", title: "its sub-agents work; nobody owes a decision" }, `waiting for ${names(a.agents)}`);
}

// showAsked shows what run r was asked: its input, the instructions as
// filled with its variables, and where it came from.
function showAsked(box, r) {
  const rows = [el("h2", {}, "What was asked"),
    el("div", { class: "label" }, "Input"),
    r.input_text ? el("pre", { class: "asked-input" }, r.input_text) : el("p", { class: "muted asked-input" }, "(no text: see the conversation)")];
  if (r.instructions) rows.push(el("div", { class: "label" }, "Instructions"), el("pre", { class: "asked-instructions" }, r.instructions));
  const from = [];
  if (r.agent) from.push("agent ", el("a", { href: `#/agents/${encodeURIComponent(r.agent.name)}` }, `${r.agent.name} v${r.agent.version}`));
  if (r.parent_run_id) from.push(from.length ? "; " : "", "a sub-agent's task from run ",
    el("a", { id: "parent-link", href: `#/runs/${r.parent_run_id}?call=${r.parent_tool_call_id || ""}` }, shortID(r.parent_run_id)));
  if (r.schedule_id) from.push(from.length ? "; " : "", "the slot of ", when(r.scheduled_for), " of schedule ",
    el("a", { href: "#/schedules/" + r.schedule_id }, shortID(r.schedule_id)));
  if (from.length) rows.push(el("p", { class: "muted asked-from" }, "From ", ...from, "."));
  box.replaceChildren(...rows);
}

function showSummary(box, r) {
  // Built again only when the run changed: a link being clicked is not
  // swapped from under the pointer.
  const key = JSON.stringify(r);
  if (box.shown === key) return;
  box.shown = key;
  const item = (label, value) => el("div", {}, el("span", {}, label), value);
  box.replaceChildren(...[
    item("Status", el("span", { id: "status" }, runStatus(r))),
    r.parent_run_id ? item("Parent", el("a", { id: "parent", href: `#/runs/${r.parent_run_id}?call=${r.parent_tool_call_id || ""}`, class: "mono" }, shortID(r.parent_run_id))) : null,
    item("Reason", r.terminal_reason || "—"),
    item("Model", r.model),
    item("Steps", r.step_count),
    item("Tokens in / out", `${r.usage.input_tokens} / ${r.usage.output_tokens}`),
    item("Cost", el("span", { id: "cost" }, costText(r))),
    (r.models || []).length > 1 ? item("Models", el("span", { id: "models" }, r.models.join(" → "))) : null,
    item("Created", when(r.created_at)),
    item("Finished", when(r.finished_at) || "—"),
    item("Conversation", el("a", { href: "#/conversations/" + r.conversation_id }, r.conversation_id.slice(0, 8) + "…")),
    r.inputs_pending || r.inputs_unapplied ? item("Inputs", el("span", { id: "inputs" },
      [r.inputs_pending ? `${r.inputs_pending} pending` : "", r.inputs_unapplied ? `${r.inputs_unapplied} unapplied` : ""].filter(Boolean).join(", "))) : null,
    r.agent ? item("Agent", el("div", { id: "agent" }, `${r.agent.name} v${r.agent.version}`)) : null,
    r.user ? item("User", el("span", { id: "user" }, r.user)) : null,
    (r.pinned_memory || []).length ? item("Pinned memory", el("div", { id: "pinned-memory" },
      ...r.pinned_memory.map((p) => el("div", {}, el("a", {
        href: `#/memory/item?namespace=${encodeURIComponent(p.namespace.join("/"))}&key=${encodeURIComponent(p.key)}`,
        "data-key": p.key,
      }, `${p.namespace.join("/")} ${p.key}`), ` v${p.version}`)))) : null,
    r.forked_from ? item("Forked from", el("div", { id: "forked-from" },
      el("a", { href: "#/runs/" + r.forked_from.run_id }, r.forked_from.run_id.slice(0, 8) + "…"),
      ` after step ${r.forked_from.step} · `,
      el("a", { id: "compare", href: `#/compare/${r.forked_from.run_id}/${r.id}` }, "compare"))) : null,
    r.evaluation ? item("Evaluation", el("div", { id: "evaluation" },
      el("a", { href: "#/evals/" + r.evaluation.id }, r.evaluation.id.slice(0, 8) + "…"), ` case ${r.evaluation.case}`)) : null,
  ].filter(Boolean));
}

// childDecisions are the decisions that the sub-agents' runs under an
// agent_runs action a wait for, each with the agents it is under
// (path: the child's, then a grandchild's, ...).
function childDecisions(a, path = []) {
  const out = [];
  for (const c of a.agents || []) {
    const ra = c.required_action;
    if (!ra) continue;
    const at = [...path, c.agent];
    if (ra.type === "agent_runs") out.push(...childDecisions(ra, at));
    else out.push({ path: at, run: c.run_id, action: ra });
  }
  return out;
}

// showActions offers what a run in requires_action asks for: its own
// decision, or those its sub-agents wait for (answered here, on the
// parent, which passes each to its child). A wait for sub-agents that
// wait for nobody asks nothing.
function showActions(box, r, refresh) {
  box.replaceChildren();
  if (r.status !== "requires_action" || !r.required_action) return;
  const send = async (body) => {
    try {
      await post(`/runs/${r.id}/actions`, body);
      box.replaceChildren(el("p", { class: "note", id: "sent" }, "Sent; the run goes on."));
      refresh();
    } catch (e) {
      box.append(el("p", { class: "error" }, e.message));
    }
  };
  const a = r.required_action;
  if (a.type !== "agent_runs") {
    box.append(decisionCard(a, r.id, send, box));
    return;
  }
  for (const d of childDecisions(a)) {
    const card = decisionCard(d.action, d.run, send, box);
    card.classList.add("child-decision");
    card.dataset.run = d.run;
    card.prepend(el("p", { class: "who" }, el("strong", {}, d.path.join(" → ")), " (run ",
      el("a", { href: "#/runs/" + d.run, class: "mono" }, shortID(d.run)), ") waits for you:"));
    box.append(card);
  }
}

// decisionCard offers decision a of run (the run, or a sub-agent's run
// under it), sent by send; errors go to box.
function decisionCard(a, run, send, box) {
  const reason = el("input", { placeholder: "what the model is told (optional)", size: 40 });
  const card = el("div", { class: "card actions" });
  if (a.type === "tool_approval") {
    card.append(el("p", {}, `The call ${a.name} ${short(a.arguments)} waits for approval.`),
      el("button", { "data-decision": "approve", onclick: () => send({ tool_call_id: a.tool_call_id, decision: "approve" }) }, "Approve"),
      el("button", { "data-decision": "reject", onclick: () => send({ tool_call_id: a.tool_call_id, decision: "reject", ...(reason.value ? { error: reason.value } : {}) }) }, "Reject"),
      reason);
  } else if (a.type === "tool_outcome_unknown") {
    const result = el("textarea", { rows: 2, cols: 50, placeholder: '{"the": "result"}' });
    const why = el("p", { class: "why muted" });
    unknownWhy(run, a.tool_call_id).then((t) => { why.textContent = t; }, () => {});
    card.append(el("p", {}, `Did ${a.name} ${short(a.arguments)} happen? Its outcome is unknown (key ${a.idempotency_key}).`), why,
      el("button", { "data-decision": "result", onclick: () => { try { send({ tool_call_id: a.tool_call_id, decision: "result", result: JSON.parse(result.value || "null") }); } catch { box.append(el("p", { class: "error" }, "the result must be JSON")); } } }, "It happened: this result"),
      result,
      el("button", { "data-decision": "retry", onclick: () => send({ tool_call_id: a.tool_call_id, decision: "retry" }) }, "It did not: retry"),
      el("button", { "data-decision": "fail", onclick: () => send({ tool_call_id: a.tool_call_id, decision: "fail", ...(reason.value ? { error: reason.value } : {}) }) }, "Fail it"),
      reason);
  } else if (a.type === "client_tool_calls") {
    const inputs = a.calls.map((c) => ({ c, box: el("textarea", { rows: 2, cols: 50, placeholder: "output (JSON)" }) }));
    card.append(el("p", {}, "The run waits for the outputs of its client tools:"),
      ...inputs.flatMap(({ c, box }) => [el("div", {}, el("code", {}, `${c.name} ${short(c.arguments)}`)), box]),
      el("button", { "data-decision": "outputs", onclick: () => {
        try { send({ type: "tool_outputs", outputs: inputs.map(({ c, box }) => ({ tool_call_id: c.tool_call_id, output: JSON.parse(box.value || "null") })) }); } catch { box.append(el("p", { class: "error" }, "outputs must be JSON")); }
      } }, "Send outputs"));
  }
  return card;
}

// unknownWhy says why call id of run has an unknown outcome: how its last
// attempt ended (the error its worker saw, or that the worker died).
async function unknownWhy(run, id) {
  for (const st of (await api(`/runs/${run}/steps`)).data) {
    const c = st.tool_calls.find((x) => x.id === id);
    if (!c) continue;
    const last = c.attempt_log[c.attempt_log.length - 1];
    if (!last) return "";
    const e = last.error || c.error;
    return `Attempt ${last.n} on ${last.worker} ended ${last.status}` + (e ? `: ${e.kind ? e.kind + ": " : ""}${e.message}` : "; its worker stopped before the tool answered") + ".";
  }
  return "";
}

// Sender is a run page's box for a message. While the run is under way
// (queued, running, requires_action) the message is input to it (POST
// /runs/{id}/input), applied at its next step boundary, or with "now" by
// cutting the model call under way; once the run has ended it goes to the
// run's conversation (POST /conversations/{id}/messages), which starts
// the conversation's next run (or steers the one in flight), and the
// viewer goes to that run. A send that got no answer is sent again with
// the same Idempotency-Key, so that it is never taken twice.
class Sender {
  constructor(runId, refresh) {
    this.runId = runId;
    this.refresh = refresh;
    this.run = null;
    this.busy = false;
    this.retry = null; // {path, body, key} of a send whose fate is unknown
    this.text = el("textarea", { id: "send-text", rows: 2, "aria-label": "message", placeholder: "A message to the run" });
    this.now = el("input", { type: "checkbox", id: "send-now" });
    this.button = el("button", { type: "submit", id: "send-button", disabled: "" }, "Send");
    this.target = el("span", { class: "muted", id: "send-target" }, "Loading the run…");
    this.result = el("p", { class: "note", id: "send-result" });
    this.err = el("p", { class: "error", id: "send-error", role: "alert" });
    this.form = el("form", { class: "card send", id: "send", autocomplete: "off", onsubmit: (e) => { e.preventDefault(); this.send(); } },
      this.text,
      el("div", { class: "send-row" }, this.button,
        el("label", { title: "cut the model call under way, and ask it again with this message" }, this.now, " now"),
        this.target),
      this.err, this.result);
    // Enter sends; Shift+Enter starts a new line.
    this.text.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.form.requestSubmit();
      }
    });
  }

  // update shows where a message goes, as run r stands.
  update(r) {
    this.run = r;
    const live = STEERABLE.has(r.status);
    const mode = live ? "run" : "conversation";
    if (this.form.dataset.mode && this.form.dataset.mode !== mode) this.result.textContent = ""; // it was about the run
    this.form.dataset.mode = mode;
    this.target.textContent = live
      ? (r.status !== "requires_action" ? "to this run: applied at its next step boundary"
        : r.required_action && r.required_action.type === "agent_runs" ? "to this run: applied once its sub-agents answer"
          : "to this run: applied once its decision is made")
      : `the run has ended (${r.status}): to its conversation, which starts its next run`;
    this.text.placeholder = live ? "A message to the run" : "A message to the conversation";
    if (!this.busy) this.button.disabled = false;
  }

  async send() {
    if (!this.run || this.busy) return;
    const r = this.run;
    const live = STEERABLE.has(r.status);
    const path = live ? `/runs/${r.id}/input` : `/conversations/${r.conversation_id}/messages`;
    const body = JSON.stringify({ input: this.text.value, when: this.now.checked ? "now" : "next" });
    const key = this.retry && this.retry.path === path && this.retry.body === body ? this.retry.key : newKey();
    this.retry = null;
    this.busy = true;
    this.button.disabled = true;
    this.err.textContent = "";
    this.result.textContent = "";
    try {
      const out = await api(path, { method: "POST", headers: { "Content-Type": "application/json", "Idempotency-Key": key }, body });
      this.text.value = "";
      this.now.checked = false;
      if (live) {
        this.result.textContent = `Sent as input #${out.n}; the timeline shows when the run applies it.`;
      } else if (out.run.id !== this.runId) {
        const how = out.action === "started" ? "started this run" : `went to this run, in flight, as input #${out.input ? out.input.n : "?"}`;
        arrival = `The message sent to conversation ${r.conversation_id.slice(0, 8)}… from run ${this.runId.slice(0, 8)}… ${how}.`;
        location.hash = "#/runs/" + out.run.id;
        return;
      } else {
        this.result.textContent = out.input ? `Sent as input #${out.input.n}; the timeline shows when the run applies it.` : "Sent.";
      }
    } catch (e) {
      const p = e.problem;
      if (!p || p.status >= 500) this.retry = { path, body, key }; // its fate is unknown: the same key again
      this.err.replaceChildren(e.message, p && p.code === "run_ended"
        ? " The message was not sent; Send sends it to the conversation, which starts its next run." : "");
    } finally {
      this.busy = false;
      this.button.disabled = false;
    }
    this.refresh();
  }
}

// follow reads a run's events from the first, reconnecting with
// Last-Event-ID when the connection breaks, until the run's end. fetch
// rather than EventSource, so that the key goes in a header.
async function follow(id, signal, onEvent, onError) {
  let last = 0;
  let retry = 1000;
  let ended = false;
  while (!signal.aborted && !ended) {
    try {
      const h = headers({ Accept: "text/event-stream" });
      if (last > 0) h["Last-Event-ID"] = String(last);
      const res = await fetch(`/runs/${id}/events`, { headers: h, signal });
      if (res.status === 204) return;
      if (!res.ok) {
        const body = await res.json().catch(() => ({}));
        onError(`${body.code || res.status}: ${body.detail || "the stream was refused"}`);
        if (res.status < 500) return;
      } else {
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        let field = { id: "", event: "", data: "" };
        let terminal = false;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl).replace(/\r$/, "");
            buf = buf.slice(nl + 1);
            if (line === "") {
              if (!field.id && field.event === "agent.event" && field.data) {
                onEvent({ type: "agent.event", data: JSON.parse(field.data) }); // a child's event: no id of the parent's
              } else if (field.id && field.data) {
                const ev = JSON.parse(field.data);
                if (ev.seq > last) {
                  last = ev.seq;
                  terminal = TERMINAL.has(ev.type);
                  onEvent(ev);
                }
              }
              field = { id: "", event: "", data: "" };
              continue;
            }
            const i = line.indexOf(":");
            const name = i < 0 ? line : line.slice(0, i);
            const v = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
            if (name === "id") field.id = v;
            else if (name === "event") field.event = v;
            else if (name === "data") field.data += (field.data ? "\n" : "") + v;
            else if (name === "retry" && /^\d+$/.test(v)) retry = Number(v);
          }
        }
        if (terminal) ended = true; // the server ends a stream after the run's end
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    if (!ended) await new Promise((r) => setTimeout(r, retry));
  }
}

// Timeline renders a run's events as steps, text, tool calls and attempts;
// focus (a step, and a tool call's id) is marked and scrolled to when it
// comes.
class Timeline {
  constructor(box, log, focus = {}) {
    this.box = box;
    this.log = log;
    this.focus = focus;
    this.step = null;
    this.text = null;
    this.calls = new Map();
    this.inputs = new Map();
    this.agentCalls = new Map(); // tool_call_id -> the sub-agent it called
    this.tree = null;
  }

  stepBox(n) {
    if (!this.step || this.step.n !== n) {
      const body = el("div", { class: "step", "data-step": n }, el("h3", {}, `Step ${n}`));
      this.box.append(body);
      if (n === this.focus.step) this.mark(body);
      this.step = { n, body };
      this.text = null;
    }
    return this.step.body;
  }

  textNode(n) {
    if (!this.text) {
      this.text = el("div", { class: "text" });
      this.stepBox(n).append(this.text);
    }
    return this.text;
  }

  note(n, msg) {
    (n > 0 ? this.stepBox(n) : this.box).append(el("p", { class: "note" }, msg));
  }

  add(ev) {
    const d = ev.data || {};
    if (ev.type === "agent.event") {
      if (this.tree) this.tree.event(d);
      return;
    }
    this.log.append(el("div", { class: "event", "data-seq": ev.seq, "data-type": ev.type },
      el("code", {}, `${ev.seq} ${ev.type}`), " ", el("span", { class: "muted" }, new Date(ev.at).toLocaleTimeString())));
    switch (ev.type) {
      case "run.created": this.note(0, `Created (model ${d.model}).`); break;
      case "run.started": this.note(0, `Started by ${d.worker} (epoch ${d.epoch}).`); break;
      case "run.resumed": this.note(0, d.reason === "recovered" ? `Taken over by ${d.worker} (epoch ${d.epoch}).` : `Resumed (epoch ${d.epoch}).`); break;
      case "step.started":
        this.stepBox(ev.step);
        if (d.transition === "input") this.note(ev.step, "The run had input when it answered: the model is asked again with it.");
        break;
      case "message.delta": this.textNode(ev.step).append(d.text); break;
      case "step.retracted":
        if (this.text) this.text.classList.add("retracted");
        this.text = null;
        this.note(ev.step, d.reason === "recovered" ? "The text above was withdrawn: the step is asked again after a takeover."
          : d.reason === "steered" ? "The text above was withdrawn: input sent with \u201cnow\u201d cut the model call, which is asked again with it."
          : "The text above was withdrawn: the model call failed and is made again.");
        break;
      case "message.completed": {
        if (!this.text || this.text.classList.contains("retracted")) {
          const t = (d.content || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
          if (t) this.textNode(ev.step).append(t);
        }
        this.text = null;
        const u = d.usage || {};
        this.note(ev.step, `Model: ${d.finish_reason}; ${u.input_tokens || 0} tokens in, ${u.output_tokens || 0} out.`);
        break;
      }
      case "tool_call.created": {
        const row = el("div", { class: "tool", "data-call": d.tool_call_id },
          el("div", {}, el("strong", {}, d.name), " ", el("code", {}, short(d.arguments)), " ", el("span", { class: "call-status" }, status(d.status)),
            d.policy ? el("span", { class: "muted" }, ` policy: ${d.policy.action}${d.policy.reason ? " (" + d.policy.reason + ")" : ""}`) : null),
          el("div", { class: "attempts" }),
          el("div", { class: "result mono" }),
          el("div", { class: "receipt mono" }));
        this.calls.set(d.tool_call_id, row);
        this.stepBox(ev.step).append(row);
        if (d.tool_call_id === this.focus.call) this.mark(row);
        this.text = null;
        break;
      }
      case "tool_attempt.started": this.attempt(d.tool_call_id, `attempt ${d.attempt} started`); this.callStatus(d.tool_call_id, "running"); break;
      case "tool_attempt.failed": this.attempt(d.tool_call_id, `attempt ${d.attempt} failed (${d.error.kind}): ${d.error.message}${d.will_retry ? "; retrying" : ""}`); break;
      case "tool_call.approved": this.callStatus(d.tool_call_id, "approved"); break;
      case "tool_call.retry_allowed": this.callStatus(d.tool_call_id, "retry allowed"); break;
      case "tool_call.unknown": this.callStatus(d.tool_call_id, "unknown"); break;
      case "tool_call.reused":
        this.callStatus(d.tool_call_id, "succeeded");
        this.attempt(d.tool_call_id, this.agentCalls.has(d.tool_call_id) ? `${this.agentCalls.get(d.tool_call_id)} answered` : "its committed result was reused");
        break;
      case "agent.started": this.agentStarted(d); break;
      case "tool_call.completed": {
        this.callStatus(d.tool_call_id, d.status);
        const row = this.calls.get(d.tool_call_id);
        if (row) row.querySelector(".result").textContent = d.error ? d.error.message : short(d.result, 400);
        break;
      }
      case "step.completed": this.note(ev.step, `Step done: ${d.finish_reason}.`); break;
      case "run.requires_action": {
        const a = d.required_action;
        this.note(ev.step, a.type === "agent_runs"
          ? `Waiting for ${names(a.agents)} to answer; the run goes on when ${a.agents.length > 1 ? "they end" : "it ends"}.`
          : `Waiting for a decision: ${a.type} on ${a.name}.`);
        break;
      }
      case "context.compacted": this.note(ev.step, `Context compacted: ${d.messages_covered} messages summarized.`); break;
      case "step.model_fallback": this.note(ev.step, `Model ${d.from} kept failing (${d.error ? d.error.kind : "error"}); falling back to ${d.to}.`); break;
      case "input.accepted": this.inputAccepted(ev); break;
      case "input.applied": {
        const card = this.inputFate(d, "applied", `applied before the model call of step ${ev.step}`);
        this.note(ev.step, `Input #${d.n} joined the conversation here${card ? ": \u201c" + short(card.dataset.text, 80) + "\u201d" : "."}`);
        break;
      }
      case "input.unapplied":
        this.inputFate(d, "unapplied", `not applied: the run ended (${d.reason}); a message to its conversation starts the next run with it`);
        break;
      default:
        if (TERMINAL.has(ev.type)) {
          this.box.append(el("p", { class: "note", id: "ended" }, `Run ${d.status} (${d.reason})${d.error ? ": " + d.error.message : ""}.`));
        }
    }
  }

  // agentStarted links the call of a sub-agent (an agent.started event's
  // data d) to the child run it started, and puts the child in the tree.
  agentStarted(d) {
    this.agentCalls.set(d.tool_call_id, d.agent);
    if (this.tree) this.tree.node(d.run_id, this.tree.root, d.agent, d.version);
    const row = this.calls.get(d.tool_call_id);
    if (row) {
      row.querySelector(".attempts").append(el("div", { class: "child-link" }, `${d.agent} v${d.version} works on it in run `,
        el("a", { href: "#/runs/" + d.run_id, class: "mono", "data-child": d.run_id }, shortID(d.run_id)),
        d.detached ? "; the run goes on without waiting, and takes its answer as input" : ""));
    }
  }

  // inputAccepted shows an input the run took: its text, who sent it and
  // when it is to be applied, pending until its fate is known.
  inputAccepted(ev) {
    const d = ev.data || {};
    const text = inputText(d.messages);
    const how = d.when === "now" ? "now: cuts the model call under way" : "at the next step boundary";
    const card = el("div", { class: "input", "data-input": d.input_id, "data-n": d.n, "data-status": "pending", "data-text": text },
      el("div", {}, el("strong", {}, `Input #${d.n}`), " ", el("span", { class: "input-status" }, status("pending")),
        el("span", { class: "muted" }, ` from ${d.source}${d.actor ? " (" + d.actor + ")" : ""}, ${how}`)),
      el("div", { class: "input-text" }, text),
      el("div", { class: "fate muted" }));
    this.inputs.set(d.input_id, card);
    (ev.step > 0 ? this.stepBox(ev.step) : this.box).append(card);
  }

  // inputFate marks input d (an input.applied or input.unapplied event's
  // data) s, and says how; it returns the input's card.
  inputFate(d, s, msg) {
    const card = this.inputs.get(d.input_id);
    if (!card) return null;
    card.dataset.status = s;
    card.querySelector(".input-status").replaceChildren(status(s));
    card.querySelector(".fate").textContent = msg[0].toUpperCase() + msg.slice(1) + ".";
    return card;
  }

  // uncarried says whether an input shown unapplied does not say yet which
  // run it was carried into.
  uncarried() {
    return [...this.inputs.values()].some((c) => c.dataset.status === "unapplied" && !c.querySelector(".carried"));
  }

  // carried links each input of inputs (GET /runs/{id}/inputs) that a
  // later run took over to that run.
  carried(inputs) {
    for (const i of inputs || []) {
      const card = this.inputs.get(i.id);
      if (!card || !i.carried_to || card.querySelector(".carried")) continue;
      card.append(el("div", { class: "carried" }, "Carried into run ",
        el("a", { href: "#/runs/" + i.carried_to, class: "mono" }, i.carried_to.slice(0, 8) + "…"), ", which applied it first."));
    }
  }

  attempt(id, msg) {
    const row = this.calls.get(id);
    if (row) row.querySelector(".attempts").append(el("div", {}, msg));
  }

  // receipts shows, on each call of steps (GET /runs/{id}/steps) that has
  // one, the receipt of its last attempt: the hashes of the arguments the
  // tool was given and of the result it returned, under the call's key.
  receipts(steps) {
    for (const st of steps) {
      for (const c of st.tool_calls) {
        const row = this.calls.get(c.id);
        const r = c.receipt;
        if (!row || !r) continue;
        row.querySelector(".receipt").replaceChildren(
          el("span", { class: "muted" }, `receipt of attempt ${r.attempt}, key `), el("code", {}, r.idempotency_key),
          el("div", {}, el("span", { class: "muted" }, "arguments sha256 "), el("code", { class: "sha" }, r.arguments_sha256 || "—")),
          el("div", {}, el("span", { class: "muted" }, "result sha256 "), el("code", { class: "sha" }, r.result_sha256 || "none: no result")));
      }
    }
  }

  // mark marks e as what the page was opened for, and scrolls to it.
  mark(e) {
    e.classList.add("focus");
    e.scrollIntoView({ block: "center" });
  }

  callStatus(id, s) {
    const row = this.calls.get(id);
    if (row) row.querySelector(".call-status").replaceChildren(status(s));
  }
}

// names lists the agents of an agent_runs action's calls.
function names(agents) {
  const n = [...new Set((agents || []).map((a) => a.agent))];
  return n.length > 1 ? n.slice(0, -1).join(", ") + " and " + n[n.length - 1] : n[0] || "its sub-agents";
}

// ChildTree shows a run's sub-agents' runs as a tree: each child with its
// agent, status and the text it streams (or its answer, once it ended),
// and its own children under it. Children's events come in the parent's
// stream as agent.event (each a child's envelope).
class ChildTree {
  constructor(box, root) {
    this.box = box;
    this.root = root;
    this.nodes = new Map();
    this.list = el("ul", { class: "tree" });
    box.append(el("h2", {}, "Sub-agents"), el("div", { class: "card" }, this.list));
  }

  // node is child run id's node, made under parent's (a run of the tree)
  // when it is new.
  node(id, parent, agent, version) {
    let n = this.nodes.get(id);
    if (!n) {
      n = { st: el("span", { class: "child-status" }, status("queued")), name: el("strong", { class: "child-agent" }, "sub-agent"),
        text: el("div", { class: "text child-text" }), kids: el("ul", { class: "tree" }), streamed: false };
      n.li = el("li", { class: "child", "data-run": id }, el("div", {}, n.name, " ", n.st, " ",
        el("a", { href: "#/runs/" + id, class: "mono" }, shortID(id))), n.text, n.kids);
      this.nodes.set(id, n);
      const up = this.nodes.get(parent);
      (up ? up.kids : this.list).append(n.li);
      this.box.hidden = false;
    }
    if (agent) n.name.textContent = version ? `${agent} v${version}` : agent;
    return n;
  }

  setStatus(n, s) {
    n.st.replaceChildren(status(s));
    n.li.dataset.status = s;
  }

  // event shows env, a child's own event.
  event(env) {
    const d = env.data || {};
    if (env.type === "agent.started") {
      this.node(d.run_id, env.run_id, d.agent, d.version);
      return;
    }
    const n = this.node(env.run_id, this.root);
    if (env.type === "message.delta") {
      n.text.append(d.text);
      n.streamed = true;
    } else if (env.type === "step.retracted") {
      n.text.textContent = "";
    } else if (env.type === "run.started" || env.type === "run.resumed") {
      this.setStatus(n, "running");
    } else if (env.type === "run.requires_action") {
      this.setStatus(n, "requires_action");
    } else if (TERMINAL.has(env.type)) {
      this.setStatus(n, d.status);
    }
  }

  // load shows the children of run parent (the root or a run under it,
  // depth levels down) and theirs, as GET /runs lists them: a child that
  // ended no longer comes in the root's stream.
  async load(parent, depth) {
    const runs = (await api(`/runs?parent_run_id=${parent}&limit=100`)).data;
    this.sync(runs, parent);
    if (depth < 4) await Promise.all(runs.filter((r) => r.sub_agents.length).map((r) => this.load(r.id, depth + 1)));
  }

  // sync shows runs, the children of run parent.
  sync(runs, parent) {
    for (const r of runs) {
      const n = this.node(r.id, parent, r.agent && r.agent.name, r.agent && r.agent.version);
      const waiting = r.status === "requires_action" && r.required_action && r.required_action.type === "agent_runs";
      this.setStatus(n, waiting ? "running" : r.status);
      if (!n.streamed && r.output_text) n.text.textContent = r.output_text;
    }
  }
}

// ---- One conversation ----

async function conversationPage(id) {
  const err = el("p", { class: "error" });
  const list = el("div", { id: "messages" });
  main.replaceChildren(el("h1", {}, "Conversation ", el("code", {}, id)), err, list,
    el("p", {}, el("a", { href: "#/?conversation_id=" + id }, "Its runs")));
  try {
    let cursor = "";
    do {
      const page = await api(`/conversations/${id}/messages?limit=100${cursor ? "&cursor=" + encodeURIComponent(cursor) : ""}`);
      for (const m of page.data) {
        const text = (m.content || []).map((p) => p.type === "text" ? p.text
          : p.type === "tool_call" ? `→ ${p.name} ${p.arguments}`
          : p.type === "tool_result" ? `← ${short(p.content, 400)}` : "").filter((t) => t !== "").join("\n");
        list.append(el("div", { class: "card message" + (m.in_context ? "" : " out"), "data-seq": m.seq },
          el("div", {}, el("strong", {}, m.role), " ", el("span", { class: "muted" }, `#${m.seq} ${when(m.created_at)}`),
            m.in_context ? "" : el("span", { class: "muted" }, " — compacted: the model no longer sees it"),
            m.run_id ? el("span", {}, " ", el("a", { href: "#/runs/" + m.run_id }, "run")) : ""),
          el("div", { class: "text" }, text),
          attachments(m)));
      }
      cursor = page.has_more ? page.next_cursor : "";
    } while (cursor);
  } catch (e) {
    err.textContent = e.message;
  }
}

// attachments shows a message's images and files: an image's thumbnail,
// a file's chip that opens it. Their bytes are the artifacts of the run
// whose input they were (GET /runs/{id}/artifacts/{artifact_id}), fetched
// with the key; an image by URL is a link (the viewer loads nothing from
// elsewhere).
function attachments(m) {
  const parts = (m.content || []).filter((p) => p.type === "image" || p.type === "file");
  if (!parts.length) return null;
  return el("div", { class: "attachments" }, ...parts.map((p) => attachment(m, p)));
}

function attachment(m, p) {
  const size = p.size ? ` ${p.size >= 1024 ? Math.round(p.size / 1024) + " KB" : p.size + " B"}` : "";
  const label = `${p.filename || p.type} (${p.media_type || "URL"},${size})`;
  if (!p.artifact_id) {
    return el("a", { class: "chip", href: p.url, target: "_blank", rel: "noopener noreferrer", "data-part": p.type }, "image: ", p.url);
  }
  const path = `/runs/${m.run_id}/artifacts/${p.artifact_id}`;
  const blob = async () => {
    const res = await fetch(path, { headers: headers() });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    return URL.createObjectURL(await res.blob());
  };
  if (p.type === "image") {
    const img = el("img", { class: "thumb", alt: label, title: label, "data-artifact": p.artifact_id });
    blob().then((u) => { img.src = u; }, (e) => { img.alt = `${label}: ${e.message}`; });
    return img;
  }
  const chip = el("button", { class: "chip", type: "button", title: "open " + label, "data-part": "file", "data-artifact": p.artifact_id },
    label);
  chip.addEventListener("click", async () => {
    try {
      const a = el("a", { href: await blob(), target: "_blank", rel: "noopener" });
      a.click();
    } catch (e) {
      chip.title = e.message;
    }
  });
  return chip;
}

route(); // after every declaration above: classes are not hoisted

// ---- Two runs side by side ----

// stepLine says what a step did: its tool calls with their results, or
// that it answered.
function stepLine(st) {
  if (!st) return "";
  if (!st.tool_calls.length) return st.status === "completed" ? "answered" : st.status;
  return st.tool_calls.map((c) => `${c.name} ${short(c.arguments, 60)} → ${c.status} ${short(c.result, 60)}`).join("; ");
}

// comparePage shows two runs (a fork and its original, or any two) step by
// step, a fork's steps after the step it was forked at; a row whose steps
// differ is marked.
async function comparePage(a, b) {
  const err = el("p", { class: "error", id: "error" });
  const table = el("table", { id: "compare-steps" });
  main.replaceChildren(el("h1", {}, "Two runs side by side"), err, table);
  try {
    const [ra, rb, sa, sb] = await Promise.all([api("/runs/" + a), api("/runs/" + b),
      api(`/runs/${a}/steps`), api(`/runs/${b}/steps`)]);
    const head = (r) => el("th", {}, el("a", { href: "#/runs/" + r.id, class: "mono" }, r.id.slice(0, 8) + "…"), " ",
      status(r.status), " ", r.model, r.agent ? ` · ${r.agent.name} v${r.agent.version}` : "");
    table.append(el("thead", {}, el("tr", {}, el("th", {}, "Step"), head(ra), head(rb))));
    // A fork's steps come after the step it was forked at: the steps
    // before it are the original's, copied.
    const at = rb.forked_from && rb.forked_from.run_id === ra.id ? rb.forked_from.step : 0;
    const body = el("tbody");
    for (let i = 0; i < Math.max(sa.data.length, at + sb.data.length); i++) {
      const x = stepLine(sa.data[i]);
      const y = i < at ? x : stepLine(sb.data[i - at]);
      body.append(el("tr", { class: (x === y ? "same" : "differs") + (i < at ? " copied" : ""), "data-step": i + 1 },
        el("td", {}, i + 1), el("td", { class: "wrap" }, x), el("td", { class: "wrap" }, i < at ? el("span", { class: "muted" }, "copied: " + y) : y)));
    }
    const out = (r) => el("td", { class: "wrap" }, r.output_text ?? "—");
    body.append(el("tr", { class: ra.output_text === rb.output_text ? "same" : "differs", id: "compare-output" },
      el("td", {}, "Answer"), out(ra), out(rb)));
    table.append(body);
  } catch (e) {
    err.textContent = e.message;
  }
}
