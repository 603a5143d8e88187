package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// shot saves a screenshot of the page to /tmp/console-name.png, for a
// person to look at (the test reads the page, not the picture).
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := "/tmp/console-" + name + ".png"
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
}

// texts is the text of each element that selector picks on the page.
func texts(t *testing.T, ctx context.Context, selector string) []string {
	t.Helper()
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		fmt.Sprintf(`[...document.querySelectorAll(%q)].map(e => e.textContent.trim())`, selector)))
	if err != nil {
		t.Fatalf("read %s: %v", selector, err)
	}
	return out
}

// open navigates to the viewer's page hash (of base) and waits for
// selector to show.
func open(t *testing.T, ctx context.Context, base, hash, selector, name string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.Navigate(base+"/ui/#"+hash), chromedp.WaitVisible(chromedp.CSS(selector))); err != nil {
		shot(t, ctx, name+"-failed")
		t.Logf("the page reads %q", texts(t, ctx, "main"))
		t.Fatalf("%s (%s): %v", hash, selector, err)
	}
}

// pageWait polls the page until expression js is true.
func pageWait(t *testing.T, ctx context.Context, js, name string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.Poll[chromedp.Void](js)); err != nil {
		shot(t, ctx, name+"-failed")
		t.Logf("the page reads %q", texts(t, ctx, "main"))
		t.Fatalf("%s: %v", js, err)
	}
}

// TestConsoleRuns: the runs page lists each run's input (its first line),
// agent and version, status, parent, cost and age; its filters (text in
// the input, agent, status, parent) keep the runs they name; a page holds
// 25 runs, and "Older runs" goes on to the next. GET /runs's q filter is
// checked at the API too, and a q too long is refused naming q.
func TestConsoleRuns(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t, withModelsFile(`{"models": {"fake": {"context_window": 0, "prices": {"input": 1000, "output": 3000}}}}`))
	c, cctx := s.Client, testCtx(t)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := c.CreateAgentJSON(cctx, json.RawMessage(`{"name": "greeter", "instructions": "Greet {{who}} warmly."}`)); err != nil {
		t.Fatal(err)
	}
	greet, err := c.CreateRun(cctx, client.CreateRun{Agent: "greeter", Variables: map[string]string{"who": "Ada"},
		Input: "/say Hello, Ada.\nsecond line of the question"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 26 {
		startRun(t, c, fmt.Sprintf("/say filler %d", i))
	}
	last := startRun(t, c, "/say The Zebra question")
	runEnded(t, c, greet.ID)
	runEnded(t, c, last)

	// The API: q keeps the runs whose input has the text, in any case.
	page, err := c.ListRuns(cctx, client.ListRuns{Text: "zebra"})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != last || page.Data[0].InputText == nil || *page.Data[0].InputText != "/say The Zebra question" {
		t.Fatalf("ListRuns q=zebra: %+v %v", page, err)
	}
	resp, err := http.Get(s.URL + "/runs?q=" + strings.Repeat("x", 201))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), `"field":"q"`) {
		t.Fatalf("a q of 201 characters: %d %s", resp.StatusCode, body)
	}

	open(t, ctx, s.URL, "/", `tr[data-run="`+last+`"]`, "runs")
	shot(t, ctx, "runs")
	rows := texts(t, ctx, "#runs tbody tr")
	if len(rows) != 25 || !strings.HasPrefix(rows[0], "/say The Zebra question") || !strings.Contains(rows[0], "completed") || !strings.Contains(rows[0], "ago") {
		t.Fatalf("the first page's rows: %q", rows)
	}
	// The next page holds the rest, the greeter's run among them.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#older")), chromedp.WaitVisible(chromedp.CSS(`tr[data-run="`+greet.ID+`"]`))); err != nil {
		shot(t, ctx, "runs-older-failed")
		t.Fatal(err)
	}
	if rows := texts(t, ctx, "#runs tbody tr"); len(rows) != 3 {
		t.Fatalf("the second page's rows: %q", rows)
	}
	cells := texts(t, ctx, `tr[data-run="`+greet.ID+`"] td`)
	full := runEnded(t, c, greet.ID)
	if len(cells) != 7 || cells[0] != "/say Hello, Ada." || cells[1] != "greeter v1" || cells[2] != "completed" || cells[5] != agentd.FormatCost(full.Cost) || full.Cost == 0 {
		t.Fatalf("the greeter's run reads %q (cost %v)", cells, full.Cost)
	}
	// Filters: the text in the input, typed into the form; the agent.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/ui/#/"), chromedp.WaitVisible(chromedp.CSS(`tr[data-run="`+last+`"]`)),
		chromedp.SendKeys(chromedp.CSS("#filter-q"), "zEBRA"+kb.Enter)); err != nil {
		t.Fatal(err)
	}
	pageWait(t, ctx, `document.querySelectorAll('#runs tbody tr').length === 1 && !!document.querySelector('tr[data-run="`+last+`"]')`, "runs-q")
	open(t, ctx, s.URL, "/?agent=greeter", `tr[data-run="`+greet.ID+`"]`, "runs-agent")
	pageWait(t, ctx, `document.querySelectorAll('#runs tbody tr').length === 1`, "runs-agent")
	open(t, ctx, s.URL, "/?status=failed", `#runs tbody tr td.muted`, "runs-status")
	if rows := texts(t, ctx, "#runs tbody tr"); len(rows) != 1 || rows[0] != "No runs match these filters." {
		t.Fatalf("failed runs: %q", rows)
	}
	shot(t, ctx, "runs-filtered")

	// A run's page shows what was asked: the input, the instructions as
	// filled with the run's variables.
	open(t, ctx, s.URL, "/runs/"+greet.ID, "#asked", "asked")
	pageWait(t, ctx, `!!document.querySelector('#ended') && !!document.querySelector('#asked .asked-instructions')`, "asked")
	shot(t, ctx, "run-asked")
	asked := texts(t, ctx, "#asked .asked-input, #asked .asked-instructions")
	if len(asked) != 2 || asked[0] != "/say Hello, Ada.\nsecond line of the question" || asked[1] != "Greet Ada warmly." {
		t.Fatalf("what was asked reads %q", asked)
	}
}

// TestConsoleSubAgents: a parent's page shows its sub-agent's run in a
// tree (agent, status, the text it streams), links the call to the child
// and the child back to its parent, and offers the approval the child
// waits for; approving it there lets the child go on, and while the
// parent then waits for its child it shows no decision owed. The call's
// answer reads "researcher answered".
func TestConsoleSubAgents(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/guarded": webhooktest.OK()})
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[
		{"name":"guarded","description":"asks first","parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true}]}`,
		sink.URL+"/guarded")))
	c, cctx := s.Client, testCtx(t)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for _, a := range []string{
		`{"name": "researcher", "description": "looks things up", "instructions": "research", "tools": ["guarded"]}`,
		`{"name": "lead", "instructions": "lead", "tools": [{"type": "agent", "agent": "researcher"}]}`,
	} {
		if _, err := c.CreateAgentJSON(cctx, json.RawMessage(a)); err != nil {
			t.Fatal(err)
		}
	}
	task, _ := json.Marshal(map[string]string{"task": "/call guarded {\"to\":\"bob\"}\n/say checked and signed off\n/stream 16 150"})
	parent, err := c.CreateRun(cctx, client.CreateRun{Agent: "lead", Input: "/call researcher " + string(task) + "\n/say done"})
	if err != nil {
		t.Fatal(err)
	}
	open(t, ctx, s.URL, "/runs/"+parent.ID, `.child-decision button[data-decision="approve"]`, "subagents")
	pageWait(t, ctx, `!!document.querySelector('#children li.child[data-status="requires_action"]')`, "subagents-tree")
	shot(t, ctx, "subagents-waiting")
	kids, err := c.ListRuns(cctx, client.ListRuns{ParentRunID: parent.ID})
	if err != nil || len(kids.Data) != 1 {
		t.Fatalf("the children: %+v %v", kids, err)
	}
	child := kids.Data[0].ID
	who := texts(t, ctx, "#actions .child-decision .who")
	if len(who) != 1 || !strings.Contains(who[0], "researcher (run "+child[:8]) || sink.Count("/guarded") != 0 {
		t.Fatalf("the decision reads %q; the tool ran %d times", who, sink.Count("/guarded"))
	}
	if links := texts(t, ctx, `#timeline .tool a[data-child="`+child+`"]`); len(links) != 1 {
		t.Fatalf("the call links its child %q", links)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.child-decision button[data-decision="approve"]`))); err != nil {
		t.Fatal(err)
	}
	// While the child works, the parent waits for it and asks nothing.
	pageWait(t, ctx, `document.querySelector('#status').textContent === 'waiting for researcher' && !document.querySelector('#actions .card')`, "subagents-working")
	pageWait(t, ctx, `document.querySelector('#children li.child .child-text').textContent.length > 0`, "subagents-streaming")
	shot(t, ctx, "subagents-streaming")
	pageWait(t, ctx, `!!document.querySelector('#ended')`, "subagents-ended")
	shot(t, ctx, "subagents-ended")
	tree := texts(t, ctx, `#children li.child[data-run="`+child+`"]`)
	if len(tree) != 1 || !strings.Contains(tree[0], "researcher v1") || !strings.Contains(tree[0], "completed") ||
		!strings.Contains(tree[0], "checked and signed off") {
		t.Fatalf("the tree reads %q", tree)
	}
	if attempts := texts(t, ctx, "#timeline .tool .attempts"); len(attempts) != 1 || !strings.Contains(attempts[0], "researcher answered") ||
		strings.Contains(attempts[0], "reused") {
		t.Fatalf("the call's lines read %q", attempts)
	}
	if r := runEnded(t, c, parent.ID); r.Status != agentd.StatusCompleted || sink.Count("/guarded") != 1 {
		t.Fatalf("the parent ended %s; the tool ran %d times", r.Status, sink.Count("/guarded"))
	}
	// The runs list filtered by parent shows the child, its parent linked.
	open(t, ctx, s.URL, "/?parent_run_id="+parent.ID, `tr[data-run="`+child+`"]`, "subagents-list")
	if cells := texts(t, ctx, "#runs tbody tr td"); len(cells) != 7 || !strings.HasPrefix(cells[0], "/call guarded") || cells[1] != "researcher v1" ||
		cells[3] != parent.ID[:8]+"…" {
		t.Fatalf("the children's list reads %q", cells)
	}
	// The child's page links back to its parent.
	open(t, ctx, s.URL, "/runs/"+child, "#parent", "subagents-child")
	pageWait(t, ctx, `!!document.querySelector('#parent-link')`, "subagents-child")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#parent")), chromedp.WaitVisible(chromedp.CSS(`#children li.child[data-run="`+child+`"]`))); err != nil {
		shot(t, ctx, "subagents-back-failed")
		t.Fatal(err)
	}
}

// TestConsolePages drives the console's pages for agents, schedules,
// webhooks and usage: an agent's page lists its versions and diffs the
// latest two, runs the agent with its variable filled, and lists its
// runs; a schedule is paused and resumed from its page, which says when
// its next slot fires; a webhook's page lists a delivery with the failed
// attempt and the one that got through, and redelivers it; the usage page
// draws the day's cost by model and lists it by model and agent as the
// ledger counts it.
func TestConsolePages(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/hook": webhooktest.FailFirst(1)})
	sinkURL, _ := url.Parse(sink.URL)
	s := setup(t, withEnv("AGENTD_SECRET_KEY", newSecretKey(t)), withEnv("AGENTD_WEBHOOK_ALLOW_HOSTS", sinkURL.Host),
		withEnv("AGENTD_WEBHOOK_BACKOFF", "50ms"),
		withModelsFile(`{"models": {"fake": {"context_window": 0, "prices": {"input": 1000, "output": 3000}}}}`))
	c, cctx := s.Client, testCtx(t)
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	hook, err := c.CreateWebhook(cctx, client.NewWebhook{URL: sink.URL + "/hook", Events: []agentd.EventType{agentd.EventRunCompleted}, Description: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateAgentJSON(cctx, json.RawMessage(`{"name": "helper", "description": "helps", "instructions": "You help {{who}}."}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateAgentJSON(cctx, "helper", json.RawMessage(`{"description": "helps", "instructions": "You help {{who}}. Be brief.", "max_steps": 4}`)); err != nil {
		t.Fatal(err)
	}

	// The agent: its versions, their diff, a run of it from the page.
	open(t, ctx, s.URL, "/agents", `tr[data-agent="helper"]`, "agents")
	if rows := texts(t, ctx, "#agents tbody tr"); len(rows) != 1 || !strings.Contains(rows[0], "helperv2helps") {
		t.Fatalf("the agents: %q", rows)
	}
	open(t, ctx, s.URL, "/agents/helper", "#agent-diff pre", "agent")
	if v := texts(t, ctx, "#agent-versions tbody tr td:first-child"); strings.Join(v, ",") != "v2,v1" {
		t.Fatalf("the versions: %q", v)
	}
	del, add := texts(t, ctx, "#agent-diff .del"), texts(t, ctx, "#agent-diff .add")
	if len(del) != 1 || del[0] != `-   "instructions": "You help {{who}}."` || len(add) != 2 ||
		add[0] != `+   "instructions": "You help {{who}}. Be brief.",` || !strings.Contains(add[1], `"max_steps": 4`) {
		t.Fatalf("the diff: -%q +%q", del, add)
	}
	shot(t, ctx, "agent")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#agent-run input[data-variable="who"]`), "Ann"),
		chromedp.SendKeys(chromedp.CSS("#run-agent-input"), "/say Hi Ann"), chromedp.Click(chromedp.CSS("#run-agent-button")),
		chromedp.WaitVisible(chromedp.CSS("#asked .asked-instructions"))); err != nil {
		shot(t, ctx, "agent-run-failed")
		t.Fatal(err)
	}
	pageWait(t, ctx, `!!document.querySelector('#ended')`, "agent-run")
	if asked := texts(t, ctx, "#asked .asked-input, #asked .asked-instructions"); strings.Join(asked, "|") != "/say Hi Ann|You help Ann. Be brief." {
		t.Fatalf("the agent's run was asked %q", asked)
	}
	open(t, ctx, s.URL, "/agents/helper", "#agent-runs tr[data-run]", "agent-runs")
	if rows := texts(t, ctx, "#agent-runs tbody tr"); len(rows) != 1 || !strings.HasPrefix(rows[0], "/say Hi Annhelper v2completed") {
		t.Fatalf("the agent's runs: %q", rows)
	}

	// The schedule: paused and resumed from its page.
	sc, err := c.CreateScheduleJSON(cctx, json.RawMessage(`{"name": "new-year", "cron": "0 0 1 1 *", "timezone": "UTC", "run": {"agent": "helper", "variables": {"who": "Bo"}, "input": "/say Happy new year"}}`))
	if err != nil {
		t.Fatal(err)
	}
	open(t, ctx, s.URL, "/schedules", `tr[data-schedule="`+sc.ID+`"]`, "schedules")
	if state := texts(t, ctx, `tr[data-schedule="`+sc.ID+`"] td.state`); len(state) != 1 || !strings.HasPrefix(state[0], "next in ") {
		t.Fatalf("the schedule's state: %q", state)
	}
	shot(t, ctx, "schedules")
	open(t, ctx, s.URL, "/schedules/"+sc.ID, `button[data-pause]`, "schedule")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-pause]`))); err != nil {
		t.Fatal(err)
	}
	pageWait(t, ctx, `document.querySelector('#schedule-state').textContent === 'paused' && document.querySelector('button[data-pause]').textContent === 'Resume'`, "schedule-paused")
	if got, err := c.GetSchedule(cctx, sc.ID); err != nil || !got.Paused {
		t.Fatalf("after Pause: %+v %v", got, err)
	}
	shot(t, ctx, "schedule-paused")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`button[data-pause]`))); err != nil {
		t.Fatal(err)
	}
	pageWait(t, ctx, `document.querySelector('#schedule-state').textContent.startsWith('next in ')`, "schedule-resumed")
	if got, err := c.GetSchedule(cctx, sc.ID); err != nil || got.Paused {
		t.Fatalf("after Resume: %+v %v", got, err)
	}

	// The webhook: the delivery of the run's end, its two attempts, and a
	// redelivery.
	for deadline := time.Now().Add(20 * time.Second); sink.Count("/hook") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the webhook was called %d times", sink.Count("/hook"))
		}
	}
	open(t, ctx, s.URL, "/webhooks", `tr[data-webhook="`+hook.ID+`"]`, "webhooks")
	open(t, ctx, s.URL, "/webhooks/"+hook.ID, "#deliveries tr[data-delivery]", "webhook")
	pageWait(t, ctx, `document.querySelectorAll('#deliveries .attempt').length === 2`, "webhook-attempts")
	attempts := texts(t, ctx, "#deliveries .attempt")
	if !strings.Contains(attempts[0], "500") || !strings.Contains(attempts[1], "200") {
		t.Fatalf("the attempts: %q", attempts)
	}
	shot(t, ctx, "webhook")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("button[data-redeliver]"))); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); sink.Count("/hook") < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after Redeliver the webhook was called %d times", sink.Count("/hook"))
		}
	}

	// A schedule whose slots started runs: the list shows their outcomes,
	// its page lists them.
	tick, err := c.CreateScheduleJSON(cctx, json.RawMessage(`{"name": "tick", "cron": "@every 1s", "run": {"agent": "helper", "variables": {"who": "Cy"}, "input": "/say tick"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var ticked *client.Schedule
	for deadline := time.Now().Add(20 * time.Second); ticked == nil || len(ticked.LastRuns) == 0; time.Sleep(100 * time.Millisecond) {
		if ticked, err = c.GetSchedule(cctx, tick.ID); err != nil || time.Now().After(deadline) {
			t.Fatalf("the schedule's runs: %+v %v", ticked, err)
		}
	}
	if _, err := c.PauseSchedule(cctx, tick.ID); err != nil {
		t.Fatal(err)
	}
	first := ticked.LastRuns[len(ticked.LastRuns)-1].RunID
	runEnded(t, c, first)
	open(t, ctx, s.URL, "/schedules", `tr[data-schedule="`+tick.ID+`"] .last-runs a[data-run="`+first+`"]`, "schedules-ticked")
	shot(t, ctx, "schedules-ticked")
	open(t, ctx, s.URL, "/schedules/"+tick.ID, `#schedule-runs tr[data-run="`+first+`"]`, "schedule-ticked")
	if row := texts(t, ctx, `#schedule-runs tr[data-run="`+first+`"]`); len(row) != 1 || !strings.HasPrefix(row[0], "/say tickhelper v2completed") {
		t.Fatalf("the schedule's run reads %q", row)
	}
	shot(t, ctx, "schedule-ticked")

	// Usage: the day's cost by model, as the ledger counts it.
	usage, err := c.Usage(cctx, client.UsageQuery{GroupBy: []agentd.UsageKey{"model"}})
	if err != nil || len(usage) != 1 {
		t.Fatalf("usage: %+v %v", usage, err)
	}
	open(t, ctx, s.URL, "/usage", "#usage-chart svg rect", "usage")
	if bars := texts(t, ctx, `#usage-chart rect[data-model="fake"]`); len(bars) != 1 {
		t.Fatalf("the chart's bars: %q", bars)
	}
	if cost := texts(t, ctx, "#usage-models td.cost"); len(cost) != 1 || cost[0] != agentd.FormatCost(usage[0].Cost) {
		t.Fatalf("the cost by model reads %q; the ledger says %v", cost, usage[0].Cost)
	}
	if agents := texts(t, ctx, "#usage-agents tbody tr td:first-child"); len(agents) != 1 || agents[0] != "helper" {
		t.Fatalf("the agents' usage: %q", agents)
	}
	shot(t, ctx, "usage")
}

// TestConsoleUnknownSaysWhy: a side effect whose outcome is unknown (its
// endpoint never answered) asks for a decision that says why: the error
// its attempt ended with.
func TestConsoleUnknownSaysWhy(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/send": webhooktest.Hang()})
	s := setup(t, withToolsFile(fmt.Sprintf(`{"tools":[
		{"name":"send","description":"sends","parameters":{"type":"object"},"url":%q,"effect":"side_effect","timeout_ms":300}]}`, sink.URL+"/send")))
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	id := startRun(t, s.Client, "/call send {\"to\":\"bob\"}\n/say sent")
	open(t, ctx, s.URL, "/runs/"+id, `#actions button[data-decision="retry"]`, "unknown")
	pageWait(t, ctx, `document.querySelector('#actions .why').textContent !== ''`, "unknown-why")
	why := texts(t, ctx, "#actions .why")
	shot(t, ctx, "unknown")
	if len(why) != 1 || !strings.HasPrefix(why[0], "Attempt 1 on ") || !strings.Contains(why[0], "ended unknown") {
		t.Fatalf("the decision says %q", why)
	}
}

// TestConsoleSubAgentTree: a run whose sub-agent hands work to its own
// sub-agent shows the grandchild under the child in its tree, with the
// answer each gave, once the run has ended.
func TestConsoleSubAgentTree(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t)
	c, cctx := s.Client, testCtx(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, a := range []string{
		`{"name": "leaf", "instructions": "answer"}`,
		`{"name": "mid", "instructions": "delegate", "tools": [{"type": "agent", "agent": "leaf"}]}`,
		`{"name": "top", "instructions": "delegate", "tools": [{"type": "agent", "agent": "mid"}]}`,
	} {
		if _, err := c.CreateAgentJSON(cctx, json.RawMessage(a)); err != nil {
			t.Fatal(err)
		}
	}
	leafTask, _ := json.Marshal(map[string]string{"task": "/say deep answer"})
	midTask, _ := json.Marshal(map[string]string{"task": "/call leaf " + string(leafTask) + "\n/say mid answer"})
	top, err := c.CreateRun(cctx, client.CreateRun{Agent: "top", Input: "/call mid " + string(midTask) + "\n/say top answer"})
	if err != nil {
		t.Fatal(err)
	}
	runEnded(t, c, top.ID)
	mids, err := c.ListRuns(cctx, client.ListRuns{ParentRunID: top.ID})
	if err != nil || len(mids.Data) != 1 {
		t.Fatalf("top's children: %+v %v", mids, err)
	}
	leaves, err := c.ListRuns(cctx, client.ListRuns{ParentRunID: mids.Data[0].ID})
	if err != nil || len(leaves.Data) != 1 {
		t.Fatalf("mid's children: %+v %v", leaves, err)
	}
	mid, leaf := mids.Data[0].ID, leaves.Data[0].ID
	open(t, ctx, s.URL, "/runs/"+top.ID, `#children li[data-run="`+mid+`"] li[data-run="`+leaf+`"]`, "tree")
	pageWait(t, ctx, `document.querySelector('li[data-run="`+leaf+`"] .child-text').textContent === 'deep answer'`, "tree-leaf")
	shot(t, ctx, "subagents-tree")
	if got := texts(t, ctx, `li[data-run="`+mid+`"] > .child-text`); len(got) != 1 || got[0] != "mid answer" {
		t.Fatalf("mid's answer reads %q", got)
	}
	if got := texts(t, ctx, `li[data-run="`+leaf+`"] > div:first-child`); len(got) != 1 || !strings.HasPrefix(got[0], "leaf v1 completed") {
		t.Fatalf("the leaf reads %q", got)
	}
}
