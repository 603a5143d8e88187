package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/persist"
	engine "github.com/agentd/agentd/internal/run"
)

// memoryFixture is what TestMemoryInTheViewer writes before it opens the
// page: items written through the API, a version written by a run's tool
// call, and one by the extractor after that run.
type memoryFixture struct {
	runID, callID string
	recallID      string // a run of a new conversation of u-42's, given the fact pinned
	step          int
	home          client.MemoryItem // users/u-42/profile home, version 2 (the run's)
	first         client.MemoryItem // its version 1 (the API's)
}

// writeMemory writes the fixture: through the API as a client does; then
// a run for user u-42 whose model calls memory_write, as an agent learns
// a fact; then the extractor's version after that run (through the store,
// as the extractor writes it).
func writeMemory(t *testing.T, s *testServer, store *persist.Store) memoryFixture {
	t.Helper()
	ctx := testCtx(t)
	m := s.Client.Memory()
	put := func(ns []string, key, value, data string) *client.MemoryItem {
		t.Helper()
		p := client.MemoryPut{Namespace: ns, Key: key, Value: value}
		if data != "" {
			p.Data = json.RawMessage(data)
		}
		it, err := m.Put(ctx, p)
		if err != nil {
			t.Fatalf("put %v %s: %v", ns, key, err)
		}
		return it
	}
	f := memoryFixture{first: *put([]string{"users", "u-42", "profile"}, "home", "lives in Lisbon", `{"kind":"fact"}`)}
	put([]string{"users", "u-7", "profile"}, "home", "lives in Oslo", "")
	put([]string{"org", "travel-policy"}, "class", "economy on flights under four hours", "")

	r, err := s.Client.CreateRun(ctx, client.CreateRun{User: "u-42",
		Memory: json.RawMessage(`{"pinned": ["users/{{user}}/profile"], "write": ["users/{{user}}/profile"]}`),
		Input:  `/call memory_write {"key": "home", "value": "moved to Porto"}` + "\n/say Noted: Porto."})
	if err != nil {
		t.Fatal(err)
	}
	f.runID = r.ID
	runEnded(t, s.Client, r.ID)
	steps, err := s.Client.Steps(ctx, r.ID)
	if err != nil || len(steps) == 0 || len(steps[0].ToolCalls) != 1 {
		t.Fatalf("the run's steps: %+v %v", steps, err)
	}
	f.callID, f.step = steps[0].ToolCalls[0].ID, steps[0].Seq
	home, err := m.Get(ctx, agentd.Namespace{"users", "u-42", "profile"}, "home", nil)
	if err != nil || home.Value != "moved to Porto" || home.Version != 2 || home.RunID != f.runID || home.ToolCallID != f.callID {
		t.Fatalf("the version the run wrote: %+v %v", home, err)
	}
	f.home = *home
	recall, err := s.Client.CreateRun(ctx, client.CreateRun{User: "u-42",
		Memory: json.RawMessage(`{"pinned": ["users/{{user}}/profile"]}`), Input: "/system"})
	if err != nil {
		t.Fatal(err)
	}
	f.recallID = recall.ID
	if r := runEnded(t, s.Client, recall.ID); r.OutputText == nil || !strings.Contains(*r.OutputText, "[users/u-42/profile] home: moved to Porto") {
		t.Fatalf("the next conversation's system prompt: %v", r.OutputText)
	}
	if _, err := store.MemoryPut(ctx, auth.LocalTenant, agentd.MemoryWrite{Namespace: agentd.Namespace{"users", "u-42", "notes"},
		Key: "snacks", Value: "likes salted peanuts", Source: agentd.MemoryFromExtraction, ExtractedFrom: f.runID}); err != nil {
		t.Fatal(err)
	}
	return f
}

// pageRows is the rows of a table on the page, each as its cells' text
// joined with " | ".
func pageRows(t *testing.T, ctx context.Context, selector string) []string {
	t.Helper()
	return pageValue[[]string](t, ctx, `[...document.querySelectorAll(`+jsString(selector)+`)].map(r =>
		[...r.cells].map(c => c.textContent.trim()).join(' | '))`)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// memoryWait waits until cond, a JavaScript expression, holds on the
// page, and fails the test with what the page shows when it does not
// within 30 s.
func memoryWait(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		screenshot(t, ctx, "memory-failed.jpg")
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash + ' | ' + document.querySelector('main').innerText`))
		t.Fatalf("%s: %v; the page: %s", what, err, state)
	}
}

// pageOpen opens the viewer at hash and waits for cond.
func pageOpen(t *testing.T, ctx context.Context, url, what, cond string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	memoryWait(t, ctx, what, cond)
}

// pageClick clicks the element selector names and waits for cond.
func pageClick(t *testing.T, ctx context.Context, selector, what, cond string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		screenshot(t, ctx, "memory-failed.jpg")
		t.Fatalf("%s: click %s: %v", what, selector, err)
	}
	memoryWait(t, ctx, what, cond)
}

// TestMemoryInTheViewer drives the viewer's memory pages in headless
// Chromium, after a run learned a fact with memory_write and a run of a
// new conversation was given it pinned (its page names the item and its
// version, and links to it): the namespaces under a prefix and their items; an item's
// value, as of its first version too, and its versions with their source
// and the run and step that wrote one, whose link opens the run on that
// step and call; a search that finds an item; the delete of an item; and
// a purge of a prefix that asks for the prefix typed again and leaves it
// empty, for the page and for the API. A server without memory is told
// as such.
func TestMemoryInTheViewer(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t)
	store, err := persist.Open(context.Background(), persist.Config{URL: s.DBURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	f := writeMemory(t, s, store)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	ui := s.URL + "/ui/"

	// The top: the namespaces one level down, and every item.
	pageOpen(t, ctx, ui+"#/memory", "the memory page", `document.querySelectorAll('#memory-items tbody tr').length === 4`)
	pageValue[bool](t, ctx, `window.cspViolations = []; document.addEventListener('securitypolicyviolation',
		(e) => cspViolations.push(e.violatedDirective + ' ' + e.blockedURI)); true`)
	if got := strings.Join(pageRows(t, ctx, `#memory-namespaces tbody tr`), "\n"); got != "org | 1\nusers | 3" {
		t.Fatalf("the top namespaces read:\n%s", got)
	}
	// Down to users, then users/u-42, by the namespaces' links.
	pageClick(t, ctx, `#memory-namespaces tr[data-namespace="users"] a`, "users",
		`document.querySelectorAll('#memory-namespaces tbody tr').length === 2 && document.querySelectorAll('#memory-items tbody tr').length === 3`)
	if got := strings.Join(pageRows(t, ctx, `#memory-namespaces tbody tr`), "\n"); got != "users/u-42 | 2\nusers/u-7 | 1" {
		t.Fatalf("the namespaces under users read:\n%s", got)
	}
	pageClick(t, ctx, `#memory-namespaces tr[data-namespace="users/u-42"] a`, "users/u-42",
		`document.querySelectorAll('#memory-items tbody tr').length === 2 && document.querySelector('#memory-purge-start')`)
	items := pageRows(t, ctx, `#memory-items tbody tr`)
	if len(items) != 2 || !strings.HasPrefix(items[0], "users/u-42/notes | snacks | likes salted peanuts | 1 | extraction |") ||
		!strings.HasPrefix(items[1], "users/u-42/profile | home | moved to Porto | 2 | agent |") {
		t.Fatalf("the items under users/u-42 read %q", items)
	}
	screenshot(t, ctx, "memory-items.jpg")

	// A search under the prefix finds the note.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#memory-query`), "peanuts"),
		chromedp.Click(chromedp.CSS(`#memory-search button[type="submit"]`))); err != nil {
		t.Fatal(err)
	}
	memoryWait(t, ctx, "the search's hits", `document.querySelector('#memory-hits tr.hit, #memory-no-hits, #memory-error:not(:empty)')`)
	if hits := pageRows(t, ctx, `#memory-hits tr.hit`); len(hits) != 1 || !strings.HasPrefix(hits[0], "users/u-42/notes | snacks | likes salted peanuts |") {
		t.Fatalf("the search for peanuts found %q (error %q)", hits, pageValue[string](t, ctx, `document.querySelector('#memory-error').textContent`))
	}
	memoryRecallChecks(t, ctx, ui, f)
	memoryItemChecks(t, ctx, f)
	memoryPurgeChecks(t, ctx, s, ui)
	memoryDeleteChecks(t, ctx, s, ui)
	if v := pageValue[[]string](t, ctx, `Array.isArray(window.cspViolations) ? cspViolations : ['the page was loaded again: its listener is gone']`); len(v) != 0 {
		t.Fatalf("the memory pages broke the Content-Security-Policy: %q", v)
	}
	memoryUnavailableChecks(t, ctx, store)
}

// memoryRecallChecks opens the run of the next conversation: its page
// names the item it was given pinned, at the version the first run wrote,
// and links to the item's page.
func memoryRecallChecks(t *testing.T, ctx context.Context, ui string, f memoryFixture) {
	t.Helper()
	pageOpen(t, ctx, ui+"#/runs/"+f.recallID, "the next conversation's run", `document.querySelector('#pinned-memory a[data-key="home"]')`)
	if got := pageValue[string](t, ctx, `document.querySelector('#pinned-memory').textContent`); got != "users/u-42/profile home v2" {
		t.Fatalf("the run's pinned memory reads %q", got)
	}
	pageClick(t, ctx, `#pinned-memory a[data-key="home"]`, "the pinned item's page",
		`document.querySelector('#memory-current[data-version="2"]')`)
	pageOpen(t, ctx, ui+"#/memory", "the memory page again", `document.querySelectorAll('#memory-items tbody tr').length === 4`)
}

// memoryItemChecks opens users/u-42/profile home from the items under
// users/u-42: its value now and as of version 1, its versions and who
// wrote each, and the link to the step that wrote version 2.
func memoryItemChecks(t *testing.T, ctx context.Context, f memoryFixture) {
	t.Helper()
	pageClick(t, ctx, `#memory-items tr[data-namespace="users/u-42/profile"][data-key="home"] a.item-link`, "the item's page",
		`document.querySelector('#memory-current[data-version="2"]') && document.querySelectorAll('#memory-versions tbody tr').length === 2`)
	if v := pageValue[string](t, ctx, `document.querySelector('#memory-value').textContent`); v != "moved to Porto" {
		t.Fatalf("the item's value reads %q", v)
	}
	versions := pageValue[[]string](t, ctx, `[...document.querySelectorAll('#memory-versions tbody tr')].map(r =>
		[r.dataset.version, r.dataset.source, r.cells[3].textContent, r.cells[4].textContent, r.cells[5].textContent,
		 [...r.cells[4].querySelectorAll('a')].map(a => a.getAttribute('href')).join(' ')].join(' | '))`)
	short := f.runID[:8] + "…"
	want := []string{
		"2 | agent | local | run " + short + " step " + strconv.Itoa(f.step) + " call " + f.callID + " | moved to Porto | #/runs/" + f.runID +
			" #/runs/" + f.runID + "?step=" + strconv.Itoa(f.step) + "&call=" + f.callID,
		"1 | api | " + f.first.Actor + " | — | lives in Lisbon | ",
	}
	if strings.Join(versions, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the versions read:\n%s\nwant:\n%s", strings.Join(versions, "\n"), strings.Join(want, "\n"))
	}
	// As of version 1: its value and data.
	pageClick(t, ctx, `#memory-versions tr[data-version="1"] button.as-of`, "the item as of version 1",
		`document.querySelector('#memory-current[data-version="1"]')`)
	if v := pageValue[string](t, ctx, `document.querySelector('#memory-value').textContent + ' ' + document.querySelector('#memory-data').textContent.replace(/\s+/g, '')`); v != `lives in Lisbon {"kind":"fact"}` {
		t.Fatalf("as of version 1 the item reads %q", v)
	}
	screenshot(t, ctx, "memory-item.jpg")
	// As of a time typed in, before the first version: nothing; now
	// again: version 2.
	pageValue[bool](t, ctx, `document.querySelector('#memory-asof').value = '2020-01-01T00:00:00'; true`)
	pageClick(t, ctx, `#memory-asof-form button[type="submit"]`, "the item as of 2020",
		`!document.querySelector('#memory-current').dataset.version && document.querySelector('#memory-current h3').textContent.startsWith('As of')`)
	if v := pageValue[string](t, ctx, `document.querySelector('#memory-value').textContent`); v != "No live item then: not written yet, or deleted." {
		t.Fatalf("as of 2020 the item reads %q", v)
	}
	pageClick(t, ctx, `#memory-now`, "the item now again", `document.querySelector('#memory-current[data-version="2"]')`)
	// The step that wrote version 2, on the run's page, its call marked.
	pageClick(t, ctx, `#memory-versions tr[data-version="2"] a.step-link`, "the step that wrote version 2",
		`document.querySelector('#timeline .step.focus[data-step="`+strconv.Itoa(f.step)+`"] .tool.focus[data-call="`+f.callID+`"]')`)
	if h := pageValue[string](t, ctx, `location.hash`); h != "#/runs/"+f.runID+"?step="+strconv.Itoa(f.step)+"&call="+f.callID {
		t.Fatalf("the step's link went to %q", h)
	}
}

// memoryPurgeChecks purges users/u-42 from its page: the purge asks for
// the prefix typed again, then the prefix is empty, on the page and
// through the API, and users/u-7 is not.
func memoryPurgeChecks(t *testing.T, ctx context.Context, s *testServer, ui string) {
	t.Helper()
	pageOpen(t, ctx, ui+"#/memory?prefix=users%2Fu-42", "users/u-42 again", `document.querySelectorAll('#memory-items tbody tr').length === 2`)
	pageClick(t, ctx, `#memory-purge-start`, "the purge's question", `!document.querySelector('#memory-purge-ask').hidden`)
	disabled := func() bool { return pageValue[bool](t, ctx, `document.querySelector('#memory-purge-button').disabled`) }
	if !disabled() {
		t.Fatal("the purge's button is enabled before the prefix is typed")
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#memory-purge-confirm`), "users/u-4")); err != nil {
		t.Fatal(err)
	}
	if !disabled() {
		t.Fatal("the purge's button is enabled with users/u-4 typed")
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#memory-purge-confirm`), "2")); err != nil {
		t.Fatal(err)
	}
	if disabled() {
		t.Fatal("the purge's button is disabled with the prefix typed")
	}
	screenshot(t, ctx, "memory-purge.jpg")
	pageClick(t, ctx, `#memory-purge-button`, "the purge", `document.querySelector('#memory-purge-result').textContent !== '' &&
		document.querySelectorAll('#memory-items tbody tr').length === 0 &&
		document.querySelector('#memory-namespaces').textContent.startsWith('No live item')`)
	if r := pageValue[string](t, ctx, `document.querySelector('#memory-purge-result').textContent + ' / ' +
		document.querySelector('#memory-namespaces').textContent`); !strings.HasPrefix(r, "Purged users/u-42: 2 items, 3 versions, ") ||
		!strings.HasSuffix(r, " / No live item under users/u-42.") {
		t.Fatalf("after the purge the page reads %q", r)
	}
	m := s.Client.Memory()
	if page, err := m.List(testCtx(t), []string{"users", "u-42"}, 0, ""); err != nil || len(page.Data) != 0 {
		t.Fatalf("the API lists %+v %v under users/u-42 after the purge", page, err)
	}
	if _, err := m.Versions(testCtx(t), []string{"users", "u-42", "profile"}, "home", 0, ""); !client.IsCode(err, api.CodeMemoryNotFound) {
		t.Fatalf("the purged item's versions: %v", err)
	}
	if page, err := m.List(testCtx(t), []string{"users"}, 0, ""); err != nil || len(page.Data) != 1 {
		t.Fatalf("the API lists %+v %v under users after the purge of users/u-42", page, err)
	}
}

// memoryDeleteChecks deletes users/u-7/profile home from its page, once
// confirmed: a tombstone on top of its versions, and no live item.
func memoryDeleteChecks(t *testing.T, ctx context.Context, s *testServer, ui string) {
	t.Helper()
	pageOpen(t, ctx, ui+"#/memory/item?namespace=users%2Fu-7%2Fprofile&key=home", "u-7's item",
		`document.querySelector('#memory-current[data-version="1"]')`)
	pageClick(t, ctx, `#memory-delete-start`, "the delete's question", `document.querySelector('#memory-delete-confirm').offsetParent !== null`)
	pageClick(t, ctx, `#memory-delete-confirm`, "the delete", `document.querySelectorAll('#memory-versions tbody tr').length === 2 &&
		!document.querySelector('#memory-current').dataset.version`)
	if r := pageValue[string](t, ctx, `document.querySelector('#memory-value').textContent + ' / ' +
		document.querySelector('#memory-versions tbody tr').className`); r != "No live item: it was deleted (its versions below), or never written. / tombstone" {
		t.Fatalf("after the delete the page reads %q", r)
	}
	if _, err := s.Client.Memory().Get(testCtx(t), []string{"users", "u-7", "profile"}, "home", nil); !client.IsCode(err, api.CodeMemoryNotFound) {
		t.Fatalf("the deleted item reads %v", err)
	}
}

// memoryUnavailableChecks opens the memory page of a server that keeps no
// memory (the API without a memory store): it says so.
func memoryUnavailableChecks(t *testing.T, ctx context.Context, store *persist.Store) {
	t.Helper()
	bare := httptest.NewServer(api.New(api.Config{Store: store, Runs: engine.New(engine.Config{Store: store}).Service()}))
	defer bare.Close()
	pageOpen(t, ctx, bare.URL+"/ui/#/memory", "a server without memory", `document.querySelector('#memory-unavailable')`)
	if r := pageValue[string](t, ctx, `document.querySelector('#memory-unavailable').textContent + ' / ' +
		document.querySelector('#memory-body').hidden`); r != "This server keeps no memory.The /memory routes answer 501 memory_unavailable: this server keeps no memory. / true" {
		t.Fatalf("without memory the page reads %q", r)
	}
	screenshot(t, ctx, "memory-unavailable.jpg")
}
