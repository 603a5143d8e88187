package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	// The child's page links back to its parent.
	open(t, ctx, s.URL, "/runs/"+child, "#parent", "subagents-child")
	pageWait(t, ctx, `!!document.querySelector('#parent-link')`, "subagents-child")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#parent")), chromedp.WaitVisible(chromedp.CSS(`#children li.child[data-run="`+child+`"]`))); err != nil {
		shot(t, ctx, "subagents-back-failed")
		t.Fatal(err)
	}
}
