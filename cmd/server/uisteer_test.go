package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// pageValue evaluates expr on the page.
func pageValue[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// waitPage waits until cond, a JavaScript expression, holds on the page,
// and fails the test (with a screenshot) when it does not within 30 s.
func waitPage(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		screenshot(t, ctx, "steer-failed.jpg")
		state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash + ' ' + (document.querySelector('#send')?.dataset.mode || '-') +
			' error ' + JSON.stringify(document.querySelector('#error')?.textContent) + ' send ' + JSON.stringify(document.querySelector('#send-error')?.textContent) +
			' ' + JSON.stringify(document.querySelector('#send-result')?.textContent)`))
		t.Fatalf("%s: %v; the page: %s", what, err, state)
	}
}

// onlyInput returns run id's one input, as GET /runs/{id}/inputs lists it.
func onlyInput(t *testing.T, c *client.Client, id string) client.Input {
	t.Helper()
	ins, err := c.ListInputs(testCtx(t), id)
	if err != nil || len(ins) != 1 {
		t.Fatalf("the inputs of run %s: %+v %v, want one", id, ins, err)
	}
	return ins[0]
}

func inputTextOf(in client.Input) string {
	var s []string
	for _, m := range in.Messages {
		for _, p := range m.Content {
			s = append(s, p.Text)
		}
	}
	return strings.Join(s, "\n")
}

// TestViewerSteersARun drives the run page's message box in headless
// Chromium: a message sent while the run streams its answer is input to
// the run, shown pending, then applied before step 2, whose answer
// follows the message's directive; once the run has ended, an empty
// message is refused by the server and the page says why, and a message
// goes to its conversation, which starts the next run, and the page goes
// there.
func TestViewerSteersARun(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t, withEnv("AGENTD_SSE_RETRY", "100ms"))
	c := s.Client
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	// 15 s of text: the page is used while the run streams its answer.
	id := startRun(t, c, "/stream 150 100")
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/ui/#/runs/"+id)); err != nil {
		t.Fatal(err)
	}
	// What the page does from here on stays within the viewer's
	// Content-Security-Policy (the page moves to the next run by its hash,
	// so this listener hears all of it).
	pageValue[bool](t, ctx, `window.cspViolations = []; document.addEventListener('securitypolicyviolation',
		(e) => cspViolations.push(e.violatedDirective + ' ' + e.blockedURI)); true`)
	waitPage(t, ctx, "the box for input to the run", `document.querySelector('#send[data-mode="run"]') && !document.querySelector('#send-button').disabled`)
	waitPage(t, ctx, "the run's text streaming", `document.querySelector('#timeline [data-step="1"] .text')?.textContent.length > 0`)

	// A message while the run streams its answer.
	const steer = "/say Steered from the viewer."
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#send-text`), steer),
		chromedp.Click(chromedp.CSS(`#send-button`)),
	); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the input, accepted", `document.querySelector('#timeline .input[data-n="1"]') &&
		document.querySelector('#send-result').textContent + document.querySelector('#send-error').textContent !== ''`)
	if got := pageValue[string](t, ctx, `document.querySelector('#send-result').textContent + '|' + document.querySelector('#send-error').textContent + '|' + document.querySelector('#send-text').value`); got != "Sent as input #1; the timeline shows when the run applies it.||" {
		t.Fatalf("after the send the box reads %q", got)
	}
	// Sent mid-answer, it waits for the step boundary, pending on the page
	// and on the server while step 1's text streams on.
	if st := pageValue[string](t, ctx, `document.querySelector('#timeline .input').dataset.status + ' ' +
		document.querySelector('#timeline .input').closest('.step').dataset.step`); st != "pending 1" {
		t.Fatalf("the input shows %q on the page", st)
	}
	if in := onlyInput(t, c, id); in.Status != agentd.InputPending {
		t.Fatalf("the server has the input as %+v while the run streams", in)
	}
	screenshot(t, ctx, "steer-pending.jpg")
	waitPage(t, ctx, "the input, applied", `document.querySelector('#timeline .input[data-status="applied"]')`)
	waitPage(t, ctx, "the run's end", `document.querySelector('#ended') && document.querySelector('#send[data-mode="conversation"]')`)
	screenshot(t, ctx, "steer-applied.jpg")

	run := runEnded(t, c, id)
	if run.Status != agentd.StatusCompleted || run.OutputText == nil || *run.OutputText != "Steered from the viewer." {
		t.Fatalf("the steered run ended %s with %v", run.Status, run.OutputText)
	}
	in := onlyInput(t, c, id)
	if in.Status != agentd.InputApplied || in.Step == nil || *in.Step != 2 || in.N != 1 || in.Source != agentd.InputFromClient ||
		in.When != agentd.InputNext || inputTextOf(in) != steer {
		t.Fatalf("the server has the input as %+v", in)
	}
	card := pageValue[[]string](t, ctx, `(() => { const c = document.querySelector('#timeline .input');
		return [c.dataset.status, c.querySelector('.status').textContent, c.querySelector('.input-text').textContent,
			c.querySelector('.fate').textContent, c.closest('.step').dataset.step]; })()`)
	if strings.Join(card, "|") != "applied|applied|"+steer+"|Applied before the model call of step 2.|1" {
		t.Fatalf("the input's card reads %q", card)
	}
	var tokens []string
	for i := 1; i <= 150; i++ {
		tokens = append(tokens, fmt.Sprintf("tok%d", i))
	}
	steps := pageValue[[]string](t, ctx, `[...document.querySelectorAll('#timeline .step')].map(s => s.dataset.step + ':' +
		[...s.querySelectorAll('.text:not(.retracted)')].map(e => e.textContent).join(''))`)
	if strings.Join(steps, "|") != "1:"+strings.Join(tokens, " ")+"|2:Steered from the viewer." {
		t.Fatalf("the timeline's steps read %q", steps)
	}
	notes := pageValue[string](t, ctx, `[...document.querySelectorAll('#timeline [data-step="2"] .note')].map(e => e.textContent).join('|')`)
	if !strings.Contains(notes, "Input #1 joined the conversation here: “"+steer+"”") || !strings.Contains(notes, "asked again with it") {
		t.Fatalf("step 2's notes read %q", notes)
	}

	// An empty message: the server's problem is shown, nothing is taken,
	// and the page stays.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#send-button`))); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the refusal of an empty message", `document.querySelector('#send-error').textContent !== ''`)
	if msg := pageValue[string](t, ctx, `location.hash + ' ' + document.querySelector('#send-error').textContent`); msg != "#/runs/"+id+
		" invalid_field: input[0].content: is required: a non-empty string" {
		t.Fatalf("the page says %q", msg)
	}
	if runs, err := c.ListRuns(testCtx(t), client.ListRuns{ConversationID: run.ConversationID}); err != nil || len(runs.Data) != 1 {
		t.Fatalf("after the refused message the conversation has runs %+v %v", runs, err)
	}

	// The run has ended: a message (sent with Enter) goes to its
	// conversation, which starts the next run, and the page follows it.
	const next = "/say The next run, from the viewer."
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`#send-text`), next+"\n")); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the page of the next run", `location.hash !== '#/runs/`+id+`' && document.querySelector('#arrival')`)
	hash := pageValue[string](t, ctx, `location.hash`)
	nextID := strings.TrimPrefix(hash, "#/runs/")
	waitPage(t, ctx, "the next run's end", `document.querySelector('#ended')`)
	screenshot(t, ctx, "steer-next-run.jpg")
	nr := runEnded(t, c, nextID)
	if nr.ConversationID != run.ConversationID || nr.Status != agentd.StatusCompleted || nr.OutputText == nil ||
		*nr.OutputText != "The next run, from the viewer." {
		t.Fatalf("the next run %s: %+v", nextID, nr)
	}
	runs, err := c.ListRuns(testCtx(t), client.ListRuns{ConversationID: run.ConversationID})
	if err != nil || len(runs.Data) != 2 || runs.Data[0].ID != nextID || runs.Data[1].ID != id {
		t.Fatalf("the conversation's runs: %+v %v", runs, err)
	}
	if ins, err := c.ListInputs(testCtx(t), nextID); err != nil || len(ins) != 0 {
		t.Fatalf("the next run has inputs %+v %v", ins, err)
	}
	onlyInput(t, c, id) // the first run's input is still its only one
	page := pageValue[[]string](t, ctx, `[document.querySelector('#arrival').textContent,
		[...document.querySelectorAll('#timeline .text:not(.retracted)')].map(e => e.textContent).join(''),
		document.querySelector('#send').dataset.mode, document.querySelector('#send-text').value]`)
	if v := pageValue[[]string](t, ctx, `cspViolations`); len(v) != 0 {
		t.Fatalf("the page broke its Content-Security-Policy: %q", v)
	}
	if !strings.Contains(page[0], "started this run") || !strings.Contains(page[0], id[:8]) ||
		page[1] != "The next run, from the viewer." || page[2] != "conversation" || page[3] != "" {
		t.Fatalf("the next run's page reads %q", page)
	}
}

// TestViewerSteersNowAndUnapplied: a message sent with "now" cuts the
// model call under way: the page withdraws the streamed text and shows
// the input applied in the same step; a message the run ends without
// (cancelled while it was pending) shows unapplied, with the reason; the
// message then sent to the conversation starts a run that takes it first,
// and the input's card links to that run.
func TestViewerSteersNowAndUnapplied(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t, withEnv("AGENTD_SSE_RETRY", "100ms"))
	c := s.Client
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	// now: the answer under way is cut.
	id := startRun(t, c, "/stream 200 100") // 20 s of text
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/ui/#/runs/"+id)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the run's text streaming", `document.querySelector('#send[data-mode="run"]') && !document.querySelector('#send-button').disabled &&
		document.querySelector('#timeline [data-step="1"] .text')?.textContent.length > 0`)
	const now = "/say Cut short."
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#send-text`), now),
		chromedp.Click(chromedp.CSS(`#send-now`)),
		chromedp.Click(chromedp.CSS(`#send-button`)),
	); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the run's end", `document.querySelector('#ended') && document.querySelector('#timeline .input[data-status="applied"]')`)
	run := runEnded(t, c, id)
	in := onlyInput(t, c, id)
	var accepted, cut time.Time
	for ev, err := range c.Events(testCtx(t), id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case agentd.EventInputAccepted:
			accepted = ev.At
		case agentd.EventStepRetracted:
			cut = ev.At
		}
	}
	t.Logf("the input was accepted %v after the run's creation; the model call was cut %v after that",
		accepted.Sub(run.CreatedAt), cut.Sub(accepted))
	if run.OutputText == nil || *run.OutputText != "Cut short." || in.When != agentd.InputNow || in.Step == nil || *in.Step != 1 {
		t.Fatalf("the run answered %v; its input %+v", run.OutputText, in)
	}
	got := pageValue[[]string](t, ctx, `[
		[...document.querySelectorAll('#timeline .text.retracted')].length > 0 ? 'retracted' : 'kept',
		[...document.querySelectorAll('#timeline .note')].map(e => e.textContent).filter(t => t.includes('cut the model call')).length + ' steered',
		document.querySelector('#timeline .input .fate').textContent,
		[...document.querySelectorAll('#timeline .text:not(.retracted)')].map(e => e.textContent).join(''),
		document.querySelector('#send-now').checked ? 'checked' : 'unchecked']`)
	if strings.Join(got, "|") != "retracted|1 steered|Applied before the model call of step 1.|Cut short.|unchecked" {
		t.Fatalf("the page reads %q", got)
	}
	screenshot(t, ctx, "steer-now.jpg")

	// unapplied: the run is cancelled with the input pending.
	id2 := startRun(t, c, "/stream 200 100")
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/ui/#/runs/"+id2)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the second run's text streaming", `location.hash === '#/runs/`+id2+`' && document.querySelector('#send[data-mode="run"]') &&
		!document.querySelector('#send-button').disabled && document.querySelector('#timeline [data-step="1"] .text')?.textContent.length > 0`)
	const late = "/say Carried over."
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#send-text`), late),
		chromedp.Click(chromedp.CSS(`#send-button`)),
	); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the input, pending", `document.querySelector('#timeline .input[data-status="pending"]')`)
	if _, err := c.CancelRun(testCtx(t), id2); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the input, unapplied", `document.querySelector('#ended') && document.querySelector('#timeline .input[data-status="unapplied"]') &&
		document.querySelector('#send[data-mode="conversation"]') && document.querySelector('#inputs')`)
	screenshot(t, ctx, "steer-unapplied.jpg")
	in2 := onlyInput(t, c, id2)
	if in2.Status != agentd.InputUnapplied || in2.Reason == nil {
		t.Fatalf("the server has the input as %+v", in2)
	}
	fate := pageValue[[]string](t, ctx, `[document.querySelector('#timeline .input .fate').textContent, document.querySelector('#inputs').textContent]`)
	if !strings.Contains(fate[0], "Not applied: the run ended ("+string(*in2.Reason)+")") || fate[1] != "1 unapplied" {
		t.Fatalf("the page reads %q", fate)
	}

	// The conversation's next run takes the unapplied input first, then
	// the message.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#send-text`), "and this too"),
		chromedp.Click(chromedp.CSS(`#send-button`)),
	); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the page of the next run", `location.hash !== '#/runs/`+id2+`' && document.querySelector('#arrival') && document.querySelector('#ended')`)
	nextID := strings.TrimPrefix(pageValue[string](t, ctx, `location.hash`), "#/runs/")
	nr := runEnded(t, c, nextID)
	in2 = onlyInput(t, c, id2)
	if in2.CarriedTo == nil || *in2.CarriedTo != nextID {
		t.Fatalf("the unapplied input: %+v; the next run is %s", in2, nextID)
	}
	msgs, err := c.Messages(testCtx(t), nr.ConversationID, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, m := range msgs.Data {
		if m.RunID != nil && *m.RunID == nextID && m.Role == agentd.RoleUser {
			users = append(users, m.Text())
		}
	}
	if strings.Join(users, "|") != late+"|and this too" {
		t.Fatalf("the next run's user messages: %q", users)
	}
	// Back on the cancelled run, its input names the run that took it.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/ui/#/runs/"+id2)); err != nil {
		t.Fatal(err)
	}
	waitPage(t, ctx, "the input's next run", `location.hash === '#/runs/`+id2+`' && document.querySelector('#timeline .input .carried a')`)
	if href := pageValue[string](t, ctx, `document.querySelector('#timeline .input .carried a').getAttribute('href')`); href != "#/runs/"+nextID {
		t.Fatalf("the input was carried into %q; the next run is %s", href, nextID)
	}
}
