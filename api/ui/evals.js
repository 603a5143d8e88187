// The viewer's evaluation pages: the tenant's evaluations, newest first;
// one evaluation's report (docs/evals.md): per version the pass rate,
// pass@k, cost and latency, the regressions first, then every case with
// its runs by version, each run linked to its page, and a baseline run
// beside a version's on the comparison page, step by step.

import { api, el, status, when } from "./lib.js";

const pct = (x) => (x === null || x === undefined ? "—" : (100 * x).toFixed(0) + "%");
const ms = (x) => (x === null || x === undefined ? "—" : x < 1000 ? x.toFixed(0) + " ms" : (x / 1000).toFixed(2) + " s");
// runLink shows the end of a run's id: an evaluation's runs are made
// together, and their ids (UUIDv7) begin alike.
const runLink = (id) => el("a", { href: "#/runs/" + id, class: "mono run-link", title: id }, "…" + id.slice(-8));

// evalsPage lists the tenant's evaluations.
export async function evalsPage(main) {
  main.replaceChildren(el("h1", {}, "Evaluations"), el("p", { class: "muted" }, "Loading…"));
  let page;
  try {
    page = await api("/evals?limit=100");
  } catch (err) {
    main.replaceChildren(el("h1", {}, "Evaluations"), el("p", { class: "error", role: "alert" }, err.message));
    return;
  }
  const table = el("table", { id: "evals" },
    el("tr", {}, ...["Evaluation", "Agent", "Versions", "Dataset", "Status", "Scored", "Created"].map((h) => el("th", {}, h))));
  for (const e of page.data) {
    table.append(el("tr", {},
      el("td", {}, el("a", { href: "#/evals/" + e.id, class: "mono" }, e.id.slice(0, 8) + "…")),
      el("td", {}, e.agent),
      el("td", {}, e.versions.map((v) => (v === e.baseline ? v + " (baseline)" : v)).join(", ")),
      el("td", {}, `${e.dataset} v${e.dataset_version}`),
      el("td", {}, status(e.status)),
      el("td", {}, `${e.scored} / ${e.runs}`),
      el("td", {}, when(e.created_at))));
  }
  main.replaceChildren(el("h1", {}, "Evaluations"),
    page.data.length ? table : el("p", { class: "muted" }, "No evaluations yet: POST /evals, or agentctl eval run."));
}

// evalPage shows one evaluation's report; it reloads while the evaluation
// runs.
export async function evalPage(main, id) {
  let e;
  try {
    e = await api("/evals/" + id);
  } catch (err) {
    main.replaceChildren(el("h1", {}, "Evaluation"), el("p", { class: "error", role: "alert" }, err.message));
    return;
  }
  const rep = e.report;
  const others = e.versions.filter((v) => v !== e.baseline);
  main.replaceChildren(...[
    el("h1", {}, "Evaluation ", el("span", { class: "mono" }, e.id)),
    el("p", {}, `${e.agent}: ${others.length ? "version " + others.join(", ") + " against " : ""}baseline ${e.baseline}, on dataset ${e.dataset} version ${e.dataset_version}`,
      e.repeat > 1 ? `, ${e.repeat} runs a case` : "", ". ", status(e.status), ` ${e.scored} of ${e.runs} runs scored.`),
    e.error ? el("p", { class: "error" }, e.error) : null,
    totalsTable(rep, e.baseline),
    el("h2", {}, `Regressions (${rep.regressions.length})`),
    rep.regressions.length ? regressionsTable(rep, e) : el("p", { class: "muted", id: "no-regressions" }, "None: no case passed less often than under the baseline."),
    el("h2", {}, "Cases"),
    casesTable(rep, e)].filter((c) => c));
  if (e.status === "running") {
    setTimeout(() => { if (location.hash === "#/evals/" + id) evalPage(main, id).catch(() => {}); }, 1000);
  }
}

function totalsTable(rep, baseline) {
  const t = el("table", { id: "eval-totals" }, el("tr", {},
    ...["Version", "Pass rate", "Passed", "pass@k", "all k", "Flaky", "Cost", "p50", "p95"].map((h) => el("th", {}, h))));
  for (const v of rep.versions) {
    t.append(el("tr", {},
      el("td", {}, v.version === baseline ? v.version + " (baseline)" : v.version),
      el("td", { class: "pass-rate" }, pct(v.pass_rate)),
      el("td", {}, `${v.passed} / ${v.runs}`),
      el("td", {}, pct(v.pass_at_k)), el("td", {}, pct(v.pass_all_k)),
      el("td", {}, v.flaky.length ? v.flaky.join(", ") : "—"),
      el("td", {}, v.cost.toFixed(4)),
      el("td", {}, ms(v.latency_ms.p50)), el("td", {}, ms(v.latency_ms.p95))));
  }
  return t;
}

// failedReasons are the reasons of a run's failed scores.
const failedReasons = (r) => r.scores.filter((s) => s.outcome === "failed").map((s) => `${s.type}: ${s.reason}`);

// baselineRun is the case's baseline run of the same repetition, if any.
function baselineRun(rep, e, caseID, n) {
  const c = rep.cases.find((x) => x.case_id === caseID);
  const b = c && c.versions[e.baseline];
  return b && b.results.find((r) => r.rep === n && r.run_id);
}

function regressionsTable(rep, e) {
  const t = el("table", { id: "regressions" }, el("tr", {},
    ...["Case", "Version", "Baseline", "Now", "Why it failed", ""].map((h) => el("th", {}, h))));
  for (const g of rep.regressions) {
    const first = g.failed[0];
    const base = first && baselineRun(rep, e, g.case_id, first.rep);
    t.append(el("tr", { class: "regression" },
      el("td", {}, g.name ? `${g.case_id} (${g.name})` : g.case_id),
      el("td", {}, g.version),
      el("td", {}, pct(g.baseline_pass_rate)), el("td", {}, pct(g.pass_rate)),
      el("td", {}, ...(first ? failedReasons(first) : []).map((s) => el("div", {}, s))),
      el("td", {}, first && first.run_id ? runLink(first.run_id) : null, " ",
        base && first.run_id ? el("a", { href: `#/compare/${base.run_id}/${first.run_id}`, class: "compare" }, "compare with baseline") : null)));
  }
  return t;
}

function casesTable(rep, e) {
  const t = el("table", { id: "eval-cases" }, el("tr", {}, el("th", {}, "Case"), ...e.versions.map((v) => el("th", {}, v))));
  for (const c of rep.cases) {
    const row = el("tr", { "data-case": c.case_id }, el("td", {}, c.name ? `${c.case_id} (${c.name})` : c.case_id));
    for (const v of e.versions) {
      const cv = c.versions[v] || { results: [] };
      row.append(el("td", {}, ...cv.results.map((r) => el("div", { class: "eval-run" },
        r.passed === null ? el("span", { class: "muted" }, r.run_id ? "running" : "waiting")
          : el("span", { class: r.passed ? "pass" : "fail" }, r.passed ? "pass" : "fail"),
        " ", r.run_id ? runLink(r.run_id) : null,
        r.passed === false ? el("div", { class: "muted reasons" }, failedReasons(r).join("; ")) : null))));
    }
    t.append(row);
  }
  return t;
}
