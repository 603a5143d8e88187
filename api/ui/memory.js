// The viewer's memory pages: the tenant's memory items browsed by
// namespace prefix, searched, and purged; one item's value (now or as of a
// time), its versions with who wrote each (the API, a run's tool call, or
// the extractor after a run, linked to that run), and its delete. They read
// the /memory routes (docs/memory.md) with the key the person typed.

import { api, el, short, when } from "./lib.js";

const PAGE = 200; // items read per page of GET /memory/items

// nsPath is a namespace's path form: its segments joined with "/".
const nsPath = (ns) => (ns || []).join("/");
const nsParts = (path) => (path ? path.split("/").filter((s) => s !== "") : []);

const memoryHref = (prefix) => "#/memory" + (prefix ? "?" + new URLSearchParams({ prefix }) : "");
const itemHref = (ns, key) => "#/memory/item?" + new URLSearchParams({ namespace: nsPath(ns), key });

// runHref is a run's page; focus (a step, and a tool call of it) marks
// where on it.
function runHref(id, focus) {
  if (!focus || !focus.step) return "#/runs/" + id;
  return "#/runs/" + id + "?" + new URLSearchParams({ step: focus.step, ...(focus.call ? { call: focus.call } : {}) });
}

// runLink links to a run's page, as the other pages do.
const runLink = (id) => el("a", { href: runHref(id), class: "mono run-link" }, id.slice(0, 8) + "…");

// provenance says who wrote version it, beside its source: the run's tool
// call (run, step, call), the run the extractor read, or nothing more for
// a client's write.
function provenance(it) {
  if (it.run_id) {
    return el("span", { class: "provenance" }, "run ", runLink(it.run_id),
      it.step ? " " : null,
      it.step ? el("a", { href: runHref(it.run_id, { step: it.step, call: it.tool_call_id }), class: "step-link" }, `step ${it.step}`) : null,
      it.tool_call_id ? el("span", { class: "muted" }, " call ", el("code", {}, it.tool_call_id)) : null);
  }
  if (it.extracted_from) return el("span", { class: "provenance" }, "extracted from run ", runLink(it.extracted_from));
  return el("span", { class: "muted" }, "—");
}

const source = (it) => el("span", { class: "source " + it.source }, it.source);

// crumbs are a prefix's namespaces from the top, each a link to its
// browse; last, when given, is what the page shows under them.
function crumbs(parts, last) {
  const out = [el("a", { href: memoryHref("") }, "Memory")];
  parts.forEach((seg, i) => out.push(" / ", el("a", { href: memoryHref(parts.slice(0, i + 1).join("/")) }, seg)));
  if (last !== undefined) out.push(" / ", el("strong", {}, last));
  return el("p", { class: "crumbs", id: "memory-crumbs" }, ...out);
}

// showProblem shows error e in box: a server that keeps no memory (501)
// is told as such, with the rest of the page hidden; any other refusal is
// its problem's code and detail, as on the other pages.
function showProblem(box, body, e) {
  if (e.problem && e.problem.status === 501) {
    box.replaceChildren(el("div", { class: "card unavailable", id: "memory-unavailable" },
      el("strong", {}, "This server keeps no memory."),
      el("p", {}, "The /memory routes answer 501 ", el("code", {}, e.problem.code || "memory_unavailable"),
        e.problem.detail ? ": " + e.problem.detail + "." : ".")));
    body.hidden = true;
    return;
  }
  box.replaceChildren(e.message);
}

// ---- Items under a prefix ----

// memoryPage lists the live items under q's prefix (every namespace
// without one), the namespaces one level below it, a search under it,
// and, for a prefix, its purge.
export function memoryPage(main, q) {
  const prefix = nsParts(q.get("prefix") || "").join("/");
  const err = el("div", { class: "error", id: "memory-error", role: "alert" });
  const input = el("input", { id: "memory-prefix", size: 40, placeholder: "namespace prefix, such as users/u-42", value: prefix, "aria-label": "namespace prefix" });
  const browse = el("form", { class: "filters", autocomplete: "off", onsubmit: (e) => { e.preventDefault(); location.hash = memoryHref(nsParts(input.value.trim()).join("/")); } },
    input, el("button", { type: "submit" }, "Browse"));
  const body = el("div", { id: "memory-body" });
  main.replaceChildren(el("h1", {}, "Memory"), crumbs(nsParts(prefix)), browse, err, body);
  const list = new ItemList(prefix, err, body);
  body.append(searchBox(prefix, err, body), el("h2", {}, "Namespaces"), list.namespaces, el("h2", {}, "Items"), list.table, list.more,
    prefix ? purgeBox(prefix, err, body, () => list.reload()) : el("p", { class: "muted" },
      "To purge, browse to a namespace prefix: a purge needs one (to forget a whole tenant, purge each top-level namespace)."));
  list.reload();
}

// ItemList is a page's items under prefix, read a page at a time, and the
// namespaces one level below the prefix that those items are in.
class ItemList {
  constructor(prefix, err, body) {
    this.prefix = prefix;
    this.depth = nsParts(prefix).length;
    this.err = err;
    this.body = body;
    this.rows = el("tbody");
    this.table = el("table", { id: "memory-items" },
      el("thead", {}, el("tr", {}, ...["Namespace", "Key", "Value", "Version", "Source", "Updated"].map((h) => el("th", {}, h)))), this.rows);
    this.namespaces = el("div", { id: "memory-namespaces" });
    this.more = el("div", { class: "pager" });
  }

  async reload() {
    this.rows.replaceChildren();
    this.counts = new Map(); // child namespace -> items under it, of those read
    this.here = 0; // items in the prefix's own namespace
    this.read = 0;
    await this.load("");
  }

  async load(cursor) {
    const p = new URLSearchParams({ limit: String(PAGE) });
    if (this.prefix) p.set("prefix", this.prefix);
    if (cursor) p.set("cursor", cursor);
    let page;
    try {
      page = await api("/memory/items?" + p);
    } catch (e) {
      showProblem(this.err, this.body, e);
      return;
    }
    this.err.replaceChildren();
    for (const it of page.data) {
      this.read++;
      if (it.namespace.length > this.depth) {
        const child = nsPath(it.namespace.slice(0, this.depth + 1));
        this.counts.set(child, (this.counts.get(child) || 0) + 1);
      } else {
        this.here++;
      }
      this.rows.append(el("tr", { "data-namespace": nsPath(it.namespace), "data-key": it.key },
        el("td", {}, el("code", {}, nsPath(it.namespace))),
        el("td", {}, el("a", { href: itemHref(it.namespace, it.key), class: "item-link" }, it.key)),
        el("td", { class: "wrap" }, short(it.value, 120)),
        el("td", {}, it.version),
        el("td", {}, source(it)),
        el("td", {}, when(it.updated_at))));
    }
    this.showNamespaces(page.has_more);
    this.more.replaceChildren(page.has_more ? el("button", { id: "memory-more", onclick: () => this.load(page.next_cursor) }, "More items") : "");
  }

  showNamespaces(partial) {
    const rows = [...this.counts].map(([ns, n]) => el("tr", { "data-namespace": ns },
      el("td", {}, el("a", { href: memoryHref(ns), class: "mono" }, ns)), el("td", {}, n)));
    const note = !this.read ? `No live item under ${this.prefix || "any namespace"}.`
      : (this.here ? `${this.here} item${this.here === 1 ? "" : "s"} in ${this.prefix} itself. ` : "") +
        (partial ? `Counted over the first ${this.read} items; more items below.` : "");
    this.namespaces.replaceChildren(
      rows.length ? el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "Namespace"), el("th", {}, "Items"))), el("tbody", {}, ...rows)) : "",
      note ? el("p", { class: "muted", id: "memory-namespaces-note" }, note) : "");
  }
}

// searchBox searches the live items under prefix (POST /memory/search):
// full text, with vectors when the server has an embedding model, and a
// filter on their data.
function searchBox(prefix, err, body) {
  const query = el("input", { id: "memory-query", size: 40, placeholder: "what to look for", "aria-label": "search query" });
  const filter = el("input", { id: "memory-filter", size: 24, placeholder: 'data filter, {"kind": "fact"}', "aria-label": "data filter (JSON)" });
  const hits = el("div", { id: "memory-hits" });
  const search = async () => {
    const req = { query: query.value, limit: 20 };
    if (prefix) req.namespace_prefix = nsParts(prefix);
    if (filter.value.trim()) {
      try {
        req.filter = JSON.parse(filter.value);
      } catch {
        hits.replaceChildren(el("p", { class: "error" }, "The data filter must be JSON, such as {\"kind\": \"fact\"}."));
        return;
      }
    }
    try {
      const out = await api("/memory/search", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(req) });
      err.replaceChildren();
      hits.replaceChildren(hitTable(out.data));
    } catch (e) {
      hits.replaceChildren();
      showProblem(err, body, e);
    }
  };
  return el("form", { class: "card memory-search", id: "memory-search", autocomplete: "off", onsubmit: (e) => { e.preventDefault(); search(); } },
    el("div", { class: "filters" }, query, filter, el("button", { type: "submit" }, "Search"),
      el("span", { class: "muted" }, prefix ? `under ${prefix}` : "in every namespace")),
    hits);
}

function hitTable(hits) {
  if (!hits.length) return el("p", { class: "muted", id: "memory-no-hits" }, "No item matches.");
  const rank = (n) => (n ? String(n) : "—");
  return el("table", {},
    el("thead", {}, el("tr", {}, ...["Namespace", "Key", "Value", "Score", "Text rank", "Vector rank"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...hits.map((h) => el("tr", { class: "hit", "data-namespace": nsPath(h.namespace), "data-key": h.key },
      el("td", {}, el("code", {}, nsPath(h.namespace))),
      el("td", {}, el("a", { href: itemHref(h.namespace, h.key), class: "item-link" }, h.key)),
      el("td", { class: "wrap" }, short(h.value, 120)),
      el("td", {}, h.score.toFixed(4)),
      el("td", {}, rank(h.text_rank)),
      el("td", {}, rank(h.vector_rank))))));
}

// purgeBox purges prefix, once the person has typed it again: every
// version of every item under it goes, for good (DELETE /memory/items with
// purge=true and confirm, the prefix again, as the API asks).
function purgeBox(prefix, err, body, done) {
  const typed = el("input", { id: "memory-purge-confirm", size: 30, autocomplete: "off", placeholder: prefix, "aria-label": "type the prefix to confirm" });
  const go = el("button", { type: "button", id: "memory-purge-button", class: "danger", disabled: "" }, "Purge for good");
  const result = el("p", { class: "note", id: "memory-purge-result" });
  const ask = el("div", { class: "confirm", id: "memory-purge-ask", hidden: "" },
    el("p", {}, "Every version of every item under ", el("code", {}, prefix), ", and every fork's copy of them, is removed for good; ",
      "an audit row keeps the counts, never the content. Type ", el("code", {}, prefix), " to confirm:"),
    el("div", { class: "filters" }, typed, go, el("button", { type: "button", onclick: () => { ask.hidden = true; typed.value = ""; go.disabled = true; } }, "Cancel")));
  const start = el("button", { type: "button", id: "memory-purge-start", class: "danger", onclick: () => { ask.hidden = false; result.textContent = ""; typed.focus(); } },
    `Purge ${prefix}…`);
  typed.addEventListener("input", () => { go.disabled = typed.value !== prefix; });
  go.addEventListener("click", async () => {
    if (typed.value !== prefix) return;
    go.disabled = true;
    try {
      const out = await api("/memory/items?" + new URLSearchParams({ prefix, purge: "true", confirm: typed.value }), { method: "DELETE" });
      ask.hidden = true;
      typed.value = "";
      err.replaceChildren();
      result.textContent = `Purged ${prefix}: ${out.items} item${out.items === 1 ? "" : "s"}, ${out.versions} version${out.versions === 1 ? "" : "s"}, ${out.bytes} bytes.`;
      done();
    } catch (e) {
      showProblem(err, body, e);
      go.disabled = typed.value !== prefix;
    }
  });
  return el("div", { class: "card danger-zone", id: "memory-purge" }, start, ask, result);
}

// ---- One item ----

// memoryItemPage shows the item at q's namespace and key: its value now
// or as of a time, its delete, and its versions with who wrote each.
export function memoryItemPage(main, q) {
  const parts = nsParts(q.get("namespace") || "");
  const key = q.get("key") || "";
  const err = el("div", { class: "error", id: "memory-error", role: "alert" });
  const body = el("div", { id: "memory-body" });
  main.replaceChildren(el("h1", {}, "Memory item ", el("code", {}, key)), crumbs(parts, key), err, body);
  const item = new ItemView(parts, key, err, body);
  body.append(item.card, item.asOfForm(), item.deleteBox(), el("h2", {}, "Versions"), item.versions, item.more);
  item.reload();
}

// ItemView is one item's page: its value (now, or as of a time), its
// versions, newest first, and its delete.
class ItemView {
  constructor(parts, key, err, body) {
    this.query = { namespace: parts.join("/"), key };
    this.err = err;
    this.body = body;
    this.asOf = ""; // "" : now; else an RFC 3339 time, as the API took it
    this.reads = 0; // reads of the item begun: only the last one is shown
    this.card = el("div", { class: "card", id: "memory-current" });
    this.rows = el("tbody");
    this.versions = el("table", { id: "memory-versions" },
      el("thead", {}, el("tr", {}, ...["Version", "Written", "Source", "Actor", "Written by", "Value", ""].map((h) => el("th", {}, h)))), this.rows);
    this.more = el("div", { class: "pager" });
  }

  reload() {
    this.showCurrent();
    this.rows.replaceChildren();
    this.loadVersions("");
  }

  // showCurrent reads the item now, or as of this.asOf: 404 is no live
  // item then (never written, or deleted).
  async showCurrent() {
    const p = new URLSearchParams(this.query);
    if (this.asOf) p.set("as_of", this.asOf);
    const head = this.asOf ? `As of ${when(this.asOf)}` : "Now";
    const n = ++this.reads;
    try {
      const it = await api("/memory/item?" + p);
      if (n !== this.reads) return;
      const field = (label, value) => el("div", {}, el("span", {}, label), value);
      this.card.dataset.version = it.version;
      this.card.replaceChildren(el("h3", {}, head, this.asOf ? el("span", { class: "muted" }, ` (${this.asOf})`) : null),
        el("div", { class: "text", id: "memory-value" }, it.value),
        it.data ? el("pre", { class: "mono", id: "memory-data" }, JSON.stringify(it.data, null, 2)) : null,
        el("div", { class: "summary" }, field("Version", it.version), field("Source", source(it)), field("Actor", it.actor || "—"),
          field("Written by", provenance(it)), field("Created", when(it.created_at)), field("Updated", when(it.updated_at)),
          it.expires_at ? field("Expires", when(it.expires_at)) : null, field("Bytes", it.bytes)));
    } catch (e) {
      if (n !== this.reads) return;
      delete this.card.dataset.version;
      if (e.problem && e.problem.code === "memory_item_not_found") {
        this.card.replaceChildren(el("h3", {}, head), el("p", { class: "note", id: "memory-value" },
          this.asOf ? "No live item then: not written yet, or deleted." : "No live item: it was deleted (its versions below), or never written."));
      } else {
        this.card.replaceChildren();
        showProblem(this.err, this.body, e);
      }
    }
  }

  async loadVersions(cursor) {
    const p = new URLSearchParams({ ...this.query, limit: "50" });
    if (cursor) p.set("cursor", cursor);
    let page;
    try {
      page = await api("/memory/item/versions?" + p);
    } catch (e) {
      if (e.problem && e.problem.code === "memory_item_not_found") this.more.replaceChildren(el("p", { class: "muted" }, "No version kept."));
      else showProblem(this.err, this.body, e);
      return;
    }
    for (const v of page.data) this.rows.append(this.versionRow(v));
    this.more.replaceChildren(page.has_more ? el("button", { id: "memory-more-versions", onclick: () => this.loadVersions(page.next_cursor) }, "Older versions") : "");
  }

  versionRow(v) {
    return el("tr", { "data-version": v.version, "data-source": v.source, class: v.deleted ? "tombstone" : null },
      el("td", {}, v.version),
      el("td", {}, when(v.updated_at)),
      el("td", {}, source(v)),
      el("td", {}, v.actor ? el("code", {}, v.actor) : "—"),
      el("td", {}, provenance(v)),
      el("td", { class: "wrap" }, v.deleted ? el("span", { class: "note" }, "deleted") : short(v.value, 120)),
      el("td", {}, el("button", { type: "button", class: "as-of", title: "read the item as it was when this version was written",
        onclick: () => { this.asOf = v.updated_at; this.showCurrent(); } }, "as of")));
  }

  // asOfForm reads the item as of a time the person picks (their local
  // time), or now again.
  asOfForm() {
    const at = el("input", { type: "datetime-local", step: "1", id: "memory-asof", "aria-label": "as of" });
    const read = (e) => {
      e.preventDefault();
      if (!at.value) return;
      this.asOf = new Date(at.value).toISOString();
      this.showCurrent();
    };
    return el("form", { class: "filters", id: "memory-asof-form", onsubmit: read }, el("span", { class: "muted" }, "Read as of"), at,
      el("button", { type: "submit" }, "Read"),
      el("button", { type: "button", id: "memory-now", onclick: () => { this.asOf = ""; at.value = ""; this.showCurrent(); } }, "Now"));
  }

  // deleteBox deletes the item once confirmed: a tombstone, its next
  // version; its older versions stay until retention removes them.
  deleteBox() {
    const result = el("span", { class: "note", id: "memory-delete-result" });
    const ask = el("span", { hidden: "" }, " Delete it? Its versions stay, with a tombstone on top. ",
      el("button", { type: "button", id: "memory-delete-confirm", class: "danger", onclick: async () => {
        ask.hidden = true;
        try {
          const t = await api("/memory/item?" + new URLSearchParams(this.query), { method: "DELETE" });
          result.textContent = ` Deleted: version ${t.version} is a tombstone.`;
          this.asOf = "";
          this.reload();
        } catch (e) {
          showProblem(this.err, this.body, e);
        }
      } }, "Delete"), " ",
      el("button", { type: "button", onclick: () => { ask.hidden = true; } }, "Cancel"));
    return el("div", { class: "filters", id: "memory-delete" },
      el("button", { type: "button", id: "memory-delete-start", onclick: () => { ask.hidden = false; result.textContent = ""; } }, "Delete item…"), ask, result);
  }
}
