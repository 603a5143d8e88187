package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/tools/webhooktest"
)

// browser returns a headless Chromium context, or skips the test when
// Debian's chromium is not installed.
func browser(t *testing.T) context.Context {
	t.Helper()
	skipShort(t, "drives a browser")
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("AGENTD_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium is not installed")
		}
		t.Skip("chromium is not installed; `.ci/run` installs Debian's chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1200, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// streamCutter is an HTTP proxy to base that cuts each event stream after
// budget bytes, as a dropped connection does; other requests pass whole.
type streamCutter struct {
	base   *url.URL
	proxy  *httputil.ReverseProxy
	budget int64
	cuts   atomic.Int32
}

func (c *streamCutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/events") {
		c.proxy.ServeHTTP(w, r)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, c.base.String()+r.URL.RequestURI(), nil)
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 512)
	var sent int64
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
			rc.Flush()
			sent += int64(n)
		}
		if err != nil {
			return // the stream ended by itself
		}
		if sent >= c.budget {
			c.cuts.Add(1)
			panic(http.ErrAbortHandler) // the connection breaks mid-stream
		}
	}
}

func screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(80))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", path)
	return path
}

// TestRunViewer drives the run viewer in headless Chromium: a run's
// timeline fills in live, through event streams that a proxy cuts, with
// no event twice; a call is approved from the page; the runs and the
// conversation pages list what they should.
func TestRunViewer(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	sink := webhooktest.New(t, map[string]webhooktest.Behaviour{"/guarded": webhooktest.OK()})
	toolsFile := filepath.Join(t.TempDir(), "tools.json")
	os.WriteFile(toolsFile, []byte(fmt.Sprintf(`{"tools":[{"name":"guarded","description":"asks first",
		"parameters":{"type":"object"},"url":%q,"effect":"side_effect","needs_approval":true}]}`, sink.URL+"/guarded")), 0o600)
	s := setup(t, withEnv("AGENTD_TOOLS_FILE", toolsFile), withEnv("AGENTD_SSE_RETRY", "100ms"),
		withModelsFile(`{"models": {"fake": {"context_window": 0, "prices": {"input": 1000, "output": 3000}}}}`))
	c := s.Client
	target, _ := url.Parse(s.URL)
	cutter := &streamCutter{base: target, proxy: httputil.NewSingleHostReverseProxy(target), budget: 2500}
	front := httptest.NewServer(cutter)
	defer front.Close()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	id := startRun(t, c, "/call calculator {\"expression\":\"6*7\"}\n/stream 40 50")
	if err := chromedp.Do(ctx,
		chromedp.Navigate(front.URL+"/ui/#/runs/"+id),
		chromedp.WaitVisible(chromedp.CSS(`#timeline .tool`)),
	); err != nil {
		screenshot(t, ctx, "run-failed.jpg")
		t.Fatalf("the run page: %v", err)
	}
	// The text fills in while the run streams it.
	var partial []int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(40 * time.Millisecond) {
		state, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](
			`[document.querySelector('#ended') ? 1 : 0, [...document.querySelectorAll('#timeline .text:not(.retracted)')].map(e => e.textContent).join('').length]`))
		if err != nil {
			t.Fatal(err)
		}
		if state[0] == 1 {
			break
		}
		if state[1] > 0 {
			partial = append(partial, state[1])
		}
		if time.Now().After(deadline) {
			screenshot(t, ctx, "run-failed.jpg")
			t.Fatal("the run never ended on the page")
		}
	}
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#timeline .text:not(.retracted)')].map(e => e.textContent).join('')`))
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`[...document.querySelectorAll('#events .event')].map(e => Number(e.dataset.seq))`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "run.jpg")
	var want []string
	for i := 1; i <= 40; i++ {
		want = append(want, fmt.Sprintf("tok%d", i))
	}
	full := runEnded(t, c, id)
	// The page's summary shows the run's cost, as the ledger counts it,
	// once it reloads the run at its end.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cost, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#cost').textContent`))
		if err != nil {
			t.Fatal(err)
		}
		if full.Cost > 0 && cost == agentd.FormatCost(full.Cost) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page shows a cost of %q; the run cost %v", cost, full.Cost)
		}
	}
	if text != strings.Join(want, " ") || full.OutputText == nil || text != *full.OutputText {
		t.Fatalf("the page shows %q", text)
	}
	if int64(len(seqs)) != full.LastEventSeq {
		t.Fatalf("the page lists %d events, the run has %d", len(seqs), full.LastEventSeq)
	}
	for i, s := range seqs {
		if s != i+1 {
			t.Fatalf("event %d on the page is seq %d: %v", i, s, seqs)
		}
	}
	if len(partial) < 2 || partial[0] >= len(text) {
		t.Fatalf("the page did not show the text while it streamed: lengths seen %v of %d", partial, len(text))
	}
	if cutter.cuts.Load() < 2 {
		t.Fatalf("the proxy cut %d streams; the test needs at least 2", cutter.cuts.Load())
	}
	t.Logf("the page read %d events over %d cut streams; its text grew through %d lengths before the end", len(seqs), cutter.cuts.Load(), len(partial))
	if os.Getenv("AGENTD_UPDATE_SCREENSHOT") != "" {
		// the picture of the run page in docs/operations.md (PNG: quality 100).
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile("../../docs/ui-run.png", png, 0o644)
	}

	// A call that needs approval is approved from the page.
	wait := startRun(t, c, "/call guarded {\"to\":\"bob\"}\n/say done")
	if err := chromedp.Do(ctx,
		chromedp.Navigate(front.URL+"/ui/#/runs/"+wait),
		chromedp.WaitVisible(chromedp.CSS(`button[data-decision="approve"]`)),
	); err != nil {
		screenshot(t, ctx, "approval-failed.jpg")
		t.Fatalf("the approval: %v", err)
	}
	screenshot(t, ctx, "approval.jpg")
	if sink.Count("/guarded") != 0 {
		t.Fatal("the tool ran before its approval")
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`button[data-decision="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#ended`)),
	); err != nil {
		screenshot(t, ctx, "approved-failed.jpg")
		t.Fatalf("after the approval: %v", err)
	}
	if r := runEnded(t, c, wait); r.Status != agentd.StatusCompleted || sink.Count("/guarded") != 1 {
		t.Fatalf("the approved run ended %s; the tool ran %d times", r.Status, sink.Count("/guarded"))
	}

	// The runs page lists both; the conversation page shows the messages.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(front.URL+"/ui/#/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-run="`+wait+`"]`)),
	); err != nil {
		screenshot(t, ctx, "runs-failed.jpg")
		t.Fatalf("the runs page: %v", err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#runs tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "runs.jpg")
	if err := chromedp.Do(ctx,
		chromedp.Navigate(front.URL+"/ui/#/conversations/"+full.ConversationID),
		chromedp.WaitVisible(chromedp.CSS(`#messages .message`)),
	); err != nil {
		screenshot(t, ctx, "conversation-failed.jpg")
		t.Fatalf("the conversation page: %v", err)
	}
	messages, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#messages .message').length`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "conversation.jpg")
	msgs, err := c.Messages(testCtx(t), full.ConversationID, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if rows < 2 || messages != len(msgs.Data) {
		t.Fatalf("the runs page lists %d runs; the conversation page %d messages of %d", rows, messages, len(msgs.Data))
	}
}

// TestForkInTheViewer: a fork's page shows where it came from, and its
// comparison with the original lines its steps up after the step it was
// forked at: the steps before are the original's, copied; the rows after
// show what each run did, the answers marked as different.
func TestForkInTheViewer(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	orig := startRun(t, s.Client, "/call calculator {\"expression\":\"6*7\"}\n/say The answer is 42.")
	runEnded(t, s.Client, orig)
	fork, err := s.Client.ForkRun(ctx, orig, client.Fork{AtStep: 1, Input: "/say Forty-two."})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	runEnded(t, s.Client, fork.ID)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.URL+"/ui/#/runs/"+fork.ID),
		chromedp.WaitVisible(chromedp.CSS(`#forked-from`)),
	); err != nil {
		screenshot(t, ctx, "fork-failed.jpg")
		t.Fatal(err)
	}
	origin, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#forked-from').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(origin, orig[:8]) || !strings.Contains(origin, "after step 1") {
		t.Fatalf("the fork's origin reads %q", origin)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#compare`)),
		chromedp.WaitVisible(chromedp.CSS(`#compare-output`)),
	); err != nil {
		screenshot(t, ctx, "compare-failed.jpg")
		t.Fatal(err)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#compare-steps tbody tr')].map(r => r.className + ' | ' + r.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rows: %q", rows)
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "same copied | 1calculator") || !strings.Contains(rows[0], "copied: calculator") ||
		!strings.HasPrefix(rows[1], "same | 2answered") || !strings.HasPrefix(rows[2], "differs | AnswerThe answer is 42.Forty-two.") {
		t.Fatalf("the comparison's rows: %q", rows)
	}
	screenshot(t, ctx, "compare.jpg")
}

// TestViewerShowsAttachments: a conversation's page shows a message's
// image as a thumbnail, its bytes fetched from the run's artifact route,
// a file as a chip, and an image by URL as a link.
func TestViewerShowsAttachments(t *testing.T) {
	t.Parallel()
	ctx := browser(t)
	s := setup(t)
	run, err := s.Client.CreateRun(testCtx(t), client.CreateRun{InputMessages: mediaMessage(client.ImageURL("https://example.com/cat.png", "")),
		Wait: 20 * time.Second})
	if err != nil || run.Status != agentd.StatusCompleted {
		t.Fatalf("%+v %v", run, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(s.URL+"/ui/#/conversations/"+run.ConversationID),
		chromedp.WaitVisible(chromedp.CSS(`#messages .attachments img.thumb`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('#messages img.thumb').naturalWidth === 1`),
	); err != nil {
		screenshot(t, ctx, "attachments-failed.jpg")
		t.Fatalf("the conversation page: %v", err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#messages .attachments > *')]
		.map(e => e.tagName.toLowerCase() + ':' + (e.dataset.part || '') + ':' + e.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "attachments.jpg")
	want := []string{"img::", "button:file:report.pdf (application/pdf, 48 B)", "a:image:image: https://example.com/cat.png"}
	if strings.Join(shown, "|") != strings.Join(want, "|") {
		t.Fatalf("the message shows %q, want %q", shown, want)
	}
}
