// The console's pages for what a tenant keeps beside its runs: agents
// (their versions, a diff of two, their runs, a run of one), schedules
// (next slot, pause and resume, last runs), webhooks (deliveries with
// their attempts, redelivery) and usage (cost and tokens by day, model
// and agent, drawn as an inline SVG chart). Each page is a function of
// the page's element, its query and the viewer's helpers ({runRow,
// runsHead, setStop}); it uses the public API only.

import { ago, api, el, money, post, shortID, status, when } from "./lib.js";

const enc = encodeURIComponent;

// errorBox is a page's line for what the API refused.
const errorBox = () => el("p", { class: "error", id: "error" });

// runsTable lists runs (GET /runs with query p) as the runs page does.
async function runsTable(box, p, h) {
  const page = await api("/runs?" + p);
  box.replaceChildren(page.data.length
    ? el("table", { class: "runs" }, h.runsHead(), el("tbody", {}, ...page.data.map(h.runRow)))
    : el("p", { class: "muted" }, "No runs yet."));
}

// ---- Agents ----

export async function agentsPage(main) {
  const err = errorBox();
  const body = el("tbody");
  main.replaceChildren(el("h1", {}, "Agents"), err,
    el("table", { id: "agents" }, el("thead", {}, el("tr", {}, ...["Agent", "Version", "Description", "Model", "Saved"].map((x) => el("th", {}, x)))), body));
  try {
    let cursor = "";
    do {
      const page = await api("/agents?limit=100" + (cursor ? "&cursor=" + enc(cursor) : ""));
      body.append(...page.data.map((a) => el("tr", { "data-agent": a.name },
        el("td", {}, el("a", { href: "#/agents/" + enc(a.name) }, a.name)),
        el("td", {}, `v${a.latest_version}`),
        el("td", { class: "wrap" }, a.description || ""),
        el("td", {}, a.model || el("span", { class: "muted" }, "default")),
        el("td", { title: when(a.created_at) }, ago(a.created_at)))));
      cursor = page.has_more ? page.next_cursor : "";
    } while (cursor);
    if (!body.children.length) body.append(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "No agents yet: POST /agents saves one.")));
  } catch (e) {
    err.textContent = e.message;
  }
}

// OWN are an agent version's own keys, beside its definition's.
const OWN = new Set(["object", "name", "version", "latest_version", "created_by", "created_at"]);

// definitionText is agent version v's definition as indented JSON, its
// keys sorted, without the version's own keys.
function definitionText(v) {
  const sort = (x) => (Array.isArray(x) ? x.map(sort)
    : x && typeof x === "object" ? Object.fromEntries(Object.keys(x).sort().map((k) => [k, sort(x[k])])) : x);
  return JSON.stringify(sort(Object.fromEntries(Object.entries(v).filter(([k]) => !OWN.has(k)))), null, 2);
}

// lineDiff is the lines of a and b as a list of [" ", "-", "+"] and line,
// by their longest common subsequence.
function lineDiff(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  const n = x.length;
  const m = y.length;
  const L = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push([" ", x[i]]); i++; j++; } else if (L[i + 1][j] >= L[i][j + 1]) out.push(["-", x[i++]]); else out.push(["+", y[j++]]);
  }
  while (i < n) out.push(["-", x[i++]]);
  while (j < m) out.push(["+", y[j++]]);
  return out;
}

// agentPage shows agent name: its latest definition, its versions (two
// of them diffed: q's from and to, the latest two by default), a form
// that runs it, and its runs.
export async function agentPage(main, name, q, h) {
  const err = errorBox();
  const def = el("pre", { class: "card definition", id: "agent-definition" });
  const versions = el("tbody");
  const diff = el("div", { id: "agent-diff" });
  const runner = el("div", { id: "agent-run" });
  const runs = el("div", { id: "agent-runs" });
  main.replaceChildren(el("p", { class: "crumbs" }, el("a", { href: "#/agents" }, "Agents"), " / ", name),
    el("h1", {}, "Agent ", el("code", {}, name)), err, runner,
    el("h2", {}, "Latest definition"), def,
    el("h2", {}, "Versions"), el("table", { id: "agent-versions" },
      el("thead", {}, el("tr", {}, ...["Version", "Saved", "By", "Description", "Diff from", "to"].map((x) => el("th", {}, x)))), versions),
    diff, el("h2", {}, "Runs"), el("p", {}, el("a", { href: "#/?agent=" + enc(name) }, "All its runs, with filters")), runs);
  try {
    const latest = await api("/agents/" + enc(name));
    def.textContent = definitionText(latest);
    const all = [];
    let cursor = "";
    do {
      const page = await api(`/agents/${enc(name)}/versions?limit=100${cursor ? "&cursor=" + enc(cursor) : ""}`);
      all.push(...page.data);
      cursor = page.has_more ? page.next_cursor : "";
    } while (cursor && all.length < 500);
    const to = Number(q.get("to")) || latest.version;
    const from = Number(q.get("from")) || (all.find((v) => v.version < to) || {}).version || to;
    const pick = (key, v, checked) => el("input", { type: "radio", name: key, value: v.version, "aria-label": `${key} v${v.version}`,
      checked: checked ? "" : null, onchange: () => diffOf() });
    versions.append(...all.map((v) => el("tr", { "data-version": v.version },
      el("td", {}, `v${v.version}`), el("td", { title: when(v.created_at) }, ago(v.created_at)), el("td", {}, v.created_by || ""),
      el("td", { class: "wrap" }, v.description || ""), el("td", {}, pick("from", v, v.version === from)), el("td", {}, pick("to", v, v.version === to)))));
    const byVersion = new Map(all.map((v) => [v.version, v]));
    const diffOf = () => {
      const a = Number(versions.querySelector('input[name="from"]:checked')?.value);
      const b = Number(versions.querySelector('input[name="to"]:checked')?.value);
      showDiff(diff, byVersion.get(a), byVersion.get(b));
    };
    diffOf();
    agentRunner(runner, latest, all);
    await runsTable(runs, "agent=" + enc(name) + "&limit=10", h);
  } catch (e) {
    err.textContent = e.message;
  }
}

// showDiff shows what changed from agent version a to version b.
function showDiff(box, a, b) {
  if (!a || !b) {
    box.replaceChildren();
    return;
  }
  const lines = lineDiff(definitionText(a), definitionText(b));
  const changed = lines.filter(([k]) => k !== " ").length;
  box.replaceChildren(el("h3", {}, `From v${a.version} to v${b.version}: `, changed ? `${changed} lines differ` : "the same definition"),
    el("pre", { class: "card diff" }, ...lines.map(([k, line]) =>
      el("div", { class: k === "-" ? "del" : k === "+" ? "add" : "same" }, `${k} ${line}`))));
}

// agentRunner is the form that starts a run of agent a (a version of
// versions, the latest by default) with its variables and an input, then
// opens the run.
function agentRunner(box, a, versions) {
  const vars = new Map();
  const fields = el("div", { class: "vars" });
  const version = el("select", { id: "run-agent-version", "aria-label": "version" },
    ...versions.map((v) => el("option", { value: v.version }, `v${v.version}${v.version === a.latest_version ? " (latest)" : ""}`)));
  const showVars = () => {
    const v = versions.find((x) => String(x.version) === version.value) || a;
    const names = [...new Set([...(v.instructions || "").matchAll(/\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g)].map((m) => m[1]))]
      .filter((n) => n !== "user");
    fields.replaceChildren(...names.map((n) => {
      if (!vars.has(n)) vars.set(n, el("input", { name: n, "data-variable": n, placeholder: n, size: 18 }));
      return el("label", {}, `{{${n}}} `, vars.get(n));
    }));
  };
  version.addEventListener("change", showVars);
  showVars();
  const input = el("textarea", { id: "run-agent-input", rows: 2, placeholder: `What to ask ${a.name}`, "aria-label": "input" });
  const err = el("p", { class: "error" });
  const form = el("form", { class: "card send", id: "run-agent", onsubmit: async (e) => {
    e.preventDefault();
    const variables = {};
    for (const f of fields.querySelectorAll("input[data-variable]")) variables[f.name] = f.value;
    try {
      const r = await post("/runs", { agent: a.name, agent_version: Number(version.value), input: input.value,
        ...(Object.keys(variables).length ? { variables } : {}) });
      location.hash = "#/runs/" + r.id;
    } catch (x) {
      err.textContent = x.message;
    }
  } }, el("h2", {}, "Run this agent"), input, fields, el("div", { class: "send-row" }, el("button", { type: "submit", id: "run-agent-button" }, "Run"), version), err);
  box.replaceChildren(form);
}

// ---- Schedules ----

// until says how long until time t.
function until(t) {
  if (!t) return "";
  const s = (new Date(t).getTime() - Date.now()) / 1000;
  if (s <= 0) return "due now";
  return "in " + ago(new Date(Date.now() - s * 1000).toISOString()).replace(" ago", "");
}

// scheduleState is a schedule's state: when its next slot fires, or why
// it is paused.
function scheduleState(s) {
  if (s.paused) return el("span", { class: "status paused" }, "paused" + (s.paused_reason ? ": " + s.paused_reason : ""));
  return el("span", { title: when(s.next_at) }, "next ", until(s.next_at), el("span", { class: "muted" }, ` (${when(s.next_at)})`));
}

// pauseButton pauses or resumes schedule s, then calls done.
function pauseButton(s, done, err) {
  return el("button", { "data-pause": s.id, onclick: async () => {
    try {
      await post("/schedules/" + s.id, { paused: !s.paused }, "PATCH");
      done();
    } catch (e) {
      err.textContent = e.message;
    }
  } }, s.paused ? "Resume" : "Pause");
}

const lastRuns = (s) => (s.last_runs || []).length
  ? el("span", { class: "last-runs" }, ...s.last_runs.map((r) =>
    el("a", { href: "#/runs/" + r.run_id, title: `slot ${when(r.scheduled_for)}`, "data-run": r.run_id }, status(r.status))))
  : el("span", { class: "muted" }, "none yet");

export async function schedulesPage(main) {
  const err = errorBox();
  const body = el("tbody");
  main.replaceChildren(el("h1", {}, "Schedules"), err,
    el("table", { id: "schedules" }, el("thead", {}, el("tr", {}, ...["Schedule", "When", "Next slot", "Last runs", ""].map((x) => el("th", {}, x)))), body));
  const load = async () => {
    try {
      const rows = [];
      let cursor = "";
      do {
        const page = await api("/schedules?limit=100" + (cursor ? "&cursor=" + enc(cursor) : ""));
        rows.push(...page.data.map((s) => el("tr", { "data-schedule": s.id },
          el("td", {}, el("a", { href: "#/schedules/" + s.id }, s.name || shortID(s.id))),
          el("td", {}, el("code", {}, s.cron), " ", el("span", { class: "muted" }, s.timezone)),
          el("td", { class: "state" }, scheduleState(s)),
          el("td", {}, lastRuns(s)),
          el("td", {}, pauseButton(s, load, err)))));
        cursor = page.has_more ? page.next_cursor : "";
      } while (cursor);
      body.replaceChildren(...rows);
      if (!rows.length) body.append(el("tr", {}, el("td", { colspan: 5, class: "muted" }, "No schedules yet: POST /schedules makes one.")));
    } catch (e) {
      err.textContent = e.message;
    }
  };
  await load();
}

export async function schedulePage(main, id, h) {
  const err = errorBox();
  const info = el("div", { class: "card summary", id: "schedule" });
  const template = el("pre", { class: "card definition", id: "schedule-run" });
  const runs = el("div", { id: "schedule-runs" });
  main.replaceChildren(el("p", { class: "crumbs" }, el("a", { href: "#/schedules" }, "Schedules"), " / ", shortID(id)),
    el("h1", {}, "Schedule ", el("code", {}, id)), err, info, el("h2", {}, "Each slot runs"), template,
    el("h2", {}, "Its runs"), el("p", {}, el("a", { href: "#/?schedule_id=" + id }, "All its runs, with filters")), runs);
  const load = async () => {
    try {
      const s = await api("/schedules/" + id);
      const item = (label, value) => el("div", {}, el("span", {}, label), value);
      info.replaceChildren(...[item("Name", s.name || "—"), item("Cron", el("code", {}, `${s.cron} ${s.timezone}`)),
        item("Next slot", el("span", { id: "schedule-state" }, scheduleState(s))), item("Overlap / catch-up", `${s.overlap} / ${s.catch_up}`),
        item("Failures in a row", String(s.consecutive_failures)), s.last_error ? item("Last error", s.last_error) : null,
        item("", pauseButton(s, load, err))].filter(Boolean));
      template.textContent = JSON.stringify(s.run, null, 2);
      await runsTable(runs, "schedule_id=" + id + "&limit=25", h);
    } catch (e) {
      err.textContent = e.message;
    }
  };
  await load();
}

// ---- Webhooks ----

export async function webhooksPage(main) {
  const err = errorBox();
  const body = el("tbody");
  main.replaceChildren(el("h1", {}, "Webhooks"), err,
    el("table", { id: "webhooks" }, el("thead", {}, el("tr", {}, ...["Endpoint", "Events", "State", "Since"].map((x) => el("th", {}, x)))), body));
  try {
    let cursor = "";
    do {
      const page = await api("/webhooks?limit=100" + (cursor ? "&cursor=" + enc(cursor) : ""));
      body.append(...page.data.map((w) => el("tr", { "data-webhook": w.id },
        el("td", {}, el("a", { href: "#/webhooks/" + w.id }, w.url), w.description ? el("div", { class: "muted" }, w.description) : null),
        el("td", { class: "wrap" }, (w.events || []).join(", ")),
        el("td", {}, w.enabled ? status("enabled") : el("span", { class: "status failed", title: w.disabled_reason || "" }, "disabled")),
        el("td", { title: when(w.created_at) }, ago(w.created_at)))));
      cursor = page.has_more ? page.next_cursor : "";
    } while (cursor);
    if (!body.children.length) body.append(el("tr", {}, el("td", { colspan: 4, class: "muted" }, "No webhooks yet: POST /webhooks adds one.")));
  } catch (e) {
    err.textContent = e.message;
  }
}

// attemptLine says how one attempt of a delivery went.
const attemptLine = (a) => el("div", { class: "attempt" }, `#${a.attempt} ${when(a.started_at)}: `,
  a.status_code ? el("strong", {}, String(a.status_code)) : el("span", { class: "error" }, "no answer"),
  ` in ${a.latency_ms} ms`, a.error ? el("span", { class: "error" }, ` — ${a.error}`) : "");

export async function webhookPage(main, id, q) {
  const err = errorBox();
  const info = el("div", { class: "card" });
  const body = el("tbody");
  const more = el("div", { class: "pager" });
  main.replaceChildren(el("p", { class: "crumbs" }, el("a", { href: "#/webhooks" }, "Webhooks"), " / ", shortID(id)),
    el("h1", {}, "Webhook ", el("code", {}, id)), err, info, el("h2", {}, "Deliveries"),
    el("table", { id: "deliveries" }, el("thead", {}, el("tr", {}, ...["Event", "Run", "Status", "Attempts", "Made", ""].map((x) => el("th", {}, x)))), body), more);
  const load = async () => {
    try {
      const w = await api("/webhooks/" + id);
      info.replaceChildren(el("div", {}, el("strong", {}, w.url), " ", w.enabled ? status("enabled") : el("span", { class: "status failed" }, "disabled")),
        el("div", { class: "muted" }, `Events: ${(w.events || []).join(", ")}`, w.disabled_reason ? ` · disabled: ${w.disabled_reason}` : ""));
      const page = await api(`/webhooks/${id}/deliveries?limit=25${q.get("cursor") ? "&cursor=" + enc(q.get("cursor")) : ""}`);
      body.replaceChildren(...page.data.map((d) => el("tr", { "data-delivery": d.id },
        el("td", {}, d.event_type),
        el("td", {}, d.run_id ? el("a", { href: "#/runs/" + d.run_id, class: "mono" }, shortID(d.run_id)) : ""),
        el("td", {}, status(d.status), d.next_attempt_at && d.status !== "delivered" ? el("div", { class: "muted" }, "next " + until(d.next_attempt_at)) : null),
        el("td", { class: "wrap attempts" }, ...(d.attempts.length ? d.attempts.map(attemptLine) : [el("span", { class: "muted" }, "none yet")])),
        el("td", { title: when(d.created_at) }, ago(d.created_at)),
        el("td", {}, el("button", { "data-redeliver": d.id, onclick: async () => {
          try {
            await post(`/webhooks/${id}/deliveries/${d.id}/redeliver`, {});
            await load();
          } catch (e) {
            err.textContent = e.message;
          }
        } }, "Redeliver")))));
      if (!page.data.length) body.append(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "No deliveries yet.")));
      more.replaceChildren(page.has_more ? el("a", { href: `#/webhooks/${id}?cursor=${enc(page.next_cursor)}` }, "Older deliveries") : "");
    } catch (e) {
      err.textContent = e.message;
    }
  };
  await load();
  return load;
}

// ---- Usage ----

const PALETTE = ["#1f5fbf", "#1f7a3a", "#8a5a00", "#b3261e", "#6b3fa0", "#00838f", "#5d6b7a", "#c2185b"];

// usagePage shows what the tenant's model calls used and cost from q's
// from to its to (the last 30 days by default): by day and model as a
// stacked bar chart, and by model and by agent as tables.
export async function usagePage(main, q) {
  const err = errorBox();
  const day = (d) => d.toISOString().slice(0, 10);
  const from = q.get("from") || day(new Date(Date.now() - 29 * 86400e3));
  const to = q.get("to") || day(new Date());
  const fromIn = el("input", { type: "date", id: "usage-from", value: from, "aria-label": "from" });
  const toIn = el("input", { type: "date", id: "usage-to", value: to, "aria-label": "to" });
  const chart = el("div", { class: "card", id: "usage-chart" });
  const byModel = el("div", { id: "usage-models" });
  const byAgent = el("div", { id: "usage-agents" });
  main.replaceChildren(el("h1", {}, "Usage and cost"),
    el("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); location.hash = `#/usage?from=${fromIn.value}&to=${toIn.value}`; } },
      "From ", fromIn, " to ", toIn, " (UTC, whole days) ", el("button", { type: "submit" }, "Show")),
    err, chart, el("h2", {}, "By model"), byModel, el("h2", {}, "By agent"), byAgent);
  try {
    const range = `from=${from}&to=${to}`;
    const [days, models, agents] = await Promise.all([api(`/usage?${range}&group_by=day,model`),
      api(`/usage?${range}&group_by=model`), api(`/usage?${range}&group_by=agent`)]);
    drawChart(chart, days.data, from, to);
    byModel.replaceChildren(usageTable("Model", models.data, (r) => r.model));
    byAgent.replaceChildren(usageTable("Agent", agents.data, (r) => r.agent ? el("a", { href: "#/agents/" + enc(r.agent) }, r.agent) : el("span", { class: "muted" }, "no agent")));
  } catch (e) {
    err.textContent = e.message;
  }
}

// usageTable lists rows of GET /usage, each named by key.
function usageTable(label, rows, key) {
  if (!rows.length) return el("p", { class: "muted" }, "No model calls in these days.");
  return el("table", { class: "usage" },
    el("thead", {}, el("tr", {}, ...[label, "Calls", "Tokens in", "cached", "Tokens out", "Cost"].map((x, i) => el("th", { class: i ? "num" : null }, x)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, el("td", {}, key(r)), el("td", { class: "num" }, r.calls),
      el("td", { class: "num" }, r.input_tokens), el("td", { class: "num" }, r.cached_input_tokens),
      el("td", { class: "num" }, r.output_tokens), el("td", { class: "num cost" }, money(r.cost))))));
}

// swatch is a legend's square of colour c (an SVG: the viewer's pages
// take no inline styles).
function swatch(c) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", "12");
  svg.setAttribute("height", "12");
  svg.setAttribute("class", "swatch");
  const r = document.createElementNS("http://www.w3.org/2000/svg", "rect");
  for (const [k, v] of Object.entries({ width: 12, height: 12, rx: 2, fill: c })) r.setAttribute(k, v);
  svg.append(r);
  return svg;
}

// drawChart draws rows (GET /usage by day and model) as a bar a day from
// from to to, each bar stacked by model: cost, or tokens when nothing had
// a price.
function drawChart(box, rows, from, to) {
  const priced = rows.some((r) => r.cost > 0);
  const value = (r) => (priced ? r.cost : r.input_tokens + r.output_tokens);
  const days = [];
  for (let d = new Date(from + "T00:00:00Z"); d <= new Date(to + "T00:00:00Z") && days.length < 366; d = new Date(d.getTime() + 86400e3)) days.push(d.toISOString().slice(0, 10));
  const models = [...new Set(rows.map((r) => r.model))];
  const color = (m) => PALETTE[models.indexOf(m) % PALETTE.length];
  const total = new Map(days.map((d) => [d, 0]));
  for (const r of rows) total.set(r.day, (total.get(r.day) || 0) + value(r));
  const max = Math.max(0, ...total.values()) || 1;
  const W = 900, H = 220, left = 60, bottom = 28, top = 10;
  const bw = (W - left - 10) / Math.max(days.length, 1);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${priced ? "cost" : "tokens"} by day and model`);
  const add = (tag, attrs, text) => {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.append(e);
    return e;
  };
  const y = (v) => H - bottom - (v / max) * (H - bottom - top);
  for (const f of [0, 0.5, 1]) {
    add("line", { x1: left, x2: W - 10, y1: y(max * f), y2: y(max * f), stroke: "#dde2e8" });
    add("text", { x: left - 6, y: y(max * f) + 4, "text-anchor": "end", "font-size": 11, fill: "#6b7480" }, priced ? money(max * f) : Math.round(max * f));
  }
  const stack = new Map(days.map((d) => [d, 0]));
  for (const r of rows) {
    const i = days.indexOf(r.day);
    if (i < 0 || value(r) <= 0) continue;
    const base = stack.get(r.day);
    stack.set(r.day, base + value(r));
    const bar = add("rect", { x: left + i * bw + 1, width: Math.max(bw - 2, 1), y: y(base + value(r)), height: y(base) - y(base + value(r)),
      fill: color(r.model), "data-day": r.day, "data-model": r.model });
    const t = document.createElementNS("http://www.w3.org/2000/svg", "title");
    t.textContent = `${r.day} ${r.model}: ${priced ? "cost " + money(r.cost) : value(r) + " tokens"}, ${r.calls} calls`;
    bar.append(t);
  }
  const every = Math.ceil(days.length / 10);
  days.forEach((d, i) => { if (i % every === 0) add("text", { x: left + i * bw + bw / 2, y: H - 10, "text-anchor": "middle", "font-size": 11, fill: "#6b7480" }, d.slice(5)); });
  const legend = el("div", { class: "legend" }, el("strong", {}, priced ? "Cost by day" : "Tokens by day (no model had a price)"), " ",
    ...models.map((m) => el("span", { class: "key" }, swatch(color(m)), m)));
  box.replaceChildren(legend, rows.length ? svg : el("p", { class: "muted" }, "No model calls in these days."));
}

