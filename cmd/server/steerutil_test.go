package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// The helpers of the steering crash tests (steer_test.go): agentd
// processes on one database, an SDK client of each, and the checks that a
// run steered across a SIGKILL took its input once.

// steerEnv is a database and the environment of the agentd processes a
// steering crash test starts on it: a lease of 1 s, so that a process
// started after a SIGKILL takes the killed one's run over within a second
// or two.
type steerEnv struct {
	env   []string
	store *persist.Store
}

func newSteerEnv(t *testing.T, more ...string) *steerEnv {
	t.Helper()
	skipShort(t, "starts server processes")
	dbURL := persisttest.NewDatabase(t)
	store, err := persist.Open(context.Background(), persist.Config{URL: dbURL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	env := append([]string{"DATABASE_URL=" + dbURL, "AGENTD_LEASE_TTL=1s", "AGENTD_POLL_INTERVAL=100ms",
		"AGENTD_LOG_LEVEL=info"}, more...)
	return &steerEnv{env: env, store: store}
}

// steerProc is an agentd process of a steerEnv and an SDK client of it,
// whose answers wire keeps.
type steerProc struct {
	*child
	c    *client.Client
	wire *wire
}

func (e *steerEnv) start(t *testing.T) *steerProc {
	t.Helper()
	ch := startChild(t, e.env)
	c, w := wiredClient("http://"+ch.addr, client.WithRetries(3, 200*time.Millisecond))
	return &steerProc{child: ch, c: c, wire: w}
}

// wiredClient is an SDK client of base whose answers the returned wire
// keeps.
func wiredClient(base string, opts ...client.Option) (*client.Client, *wire) {
	w := &wire{next: http.DefaultTransport}
	return client.New(base, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: w})}, opts...)...), w
}

// followUntil follows run id's events through c until one of type typ, and
// returns it; at returns, the stream is closed.
func followUntil(t *testing.T, c *client.Client, id string, typ agentd.EventType) client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for ev, err := range c.Events(ctx, id, 0) {
		if err != nil {
			t.Fatalf("run %s: waiting for %s: %v", id, typ, err)
		}
		if ev.Type == typ {
			return ev
		}
		if ev.Type.Terminal() {
			t.Fatalf("run %s ended (%s) before any %s", id, ev.Type, typ)
		}
	}
	t.Fatalf("run %s: the stream ended before any %s", id, typ)
	return client.Event{}
}

// storedEvents is run id's log as the database holds it.
func (e *steerEnv) storedEvents(t *testing.T, id string) []agentd.Event {
	t.Helper()
	evs, err := e.store.EventsAfter(context.Background(), id, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// inputEvents counts the input events of evs per type and input id.
func inputEvents(t *testing.T, evs []agentd.Event) map[agentd.EventType]map[string]int {
	t.Helper()
	out := map[agentd.EventType]map[string]int{}
	for _, ev := range evs {
		switch ev.Type {
		case agentd.EventInputAccepted, agentd.EventInputApplied, agentd.EventInputUnapplied:
		default:
			continue
		}
		var d struct {
			InputID string `json:"input_id"`
		}
		env, err := agentd.DecodeEnvelope(ev.Data) // a stored event is its envelope
		if err == nil {
			err = json.Unmarshal(env.Data, &d)
		}
		if err != nil {
			t.Fatalf("event %d (%s): %v", ev.Seq, ev.Type, err)
		}
		if out[ev.Type] == nil {
			out[ev.Type] = map[string]int{}
		}
		out[ev.Type][d.InputID]++
	}
	return out
}

// eventTypes is evs's types, in order, for a failure's message.
func eventTypes(evs []agentd.Event) string {
	types := make([]string, 0, len(evs))
	for _, ev := range evs {
		if ev.Type != agentd.EventMessageDelta || len(types) == 0 || types[len(types)-1] != "message.delta…" {
			types = append(types, string(ev.Type))
		}
		if ev.Type == agentd.EventMessageDelta {
			types[len(types)-1] = "message.delta…"
		}
	}
	return strings.Join(types, " ")
}

// transcript is a conversation's messages, one line a part: "ROLE: TEXT"
// (its newlines written \n), "call NAME ID", "result ID", with the
// message's status when it is not completed.
func transcript(msgs []client.Message) []string {
	var out []string
	for _, m := range msgs {
		note := ""
		if m.Status != agentd.MessageCompleted {
			note = " (" + string(m.Status) + ")"
		}
		for _, p := range m.Content {
			switch p.Type {
			case agentd.PartText:
				out = append(out, string(m.Role)+": "+strings.ReplaceAll(p.Text, "\n", `\n`)+note)
			case agentd.PartToolCall:
				out = append(out, "call "+p.Name+" "+p.ID+note)
			case agentd.PartToolResult:
				out = append(out, "result "+p.ToolCallID+note)
			}
		}
	}
	return out
}

// checkTurnOrder checks the completed messages of a conversation as a
// provider takes them: every assistant message with tool calls followed at
// once by one result for each of its calls, and no result anywhere else.
func checkTurnOrder(t *testing.T, msgs []client.Message) {
	t.Helper()
	open := map[string]bool{}
	for i, m := range msgs {
		if m.Status != agentd.MessageCompleted {
			continue
		}
		var calls, results []string
		for _, p := range m.Content {
			switch p.Type {
			case agentd.PartToolCall:
				calls = append(calls, p.ID)
			case agentd.PartToolResult:
				results = append(results, p.ToolCallID)
			}
		}
		if len(results) == 0 && len(open) > 0 {
			t.Errorf("message %d (%s, seq %d) comes between tool calls %v and their results", i, m.Role, m.Seq, open)
		}
		for _, id := range results {
			if !open[id] {
				t.Errorf("message %d (seq %d): result of %s answers no call just before it", i, m.Seq, id)
			}
			delete(open, id)
		}
		for _, id := range calls {
			open[id] = true
		}
	}
	if len(open) > 0 {
		t.Errorf("tool calls %v have no result", open)
	}
}

// checkSteeredOnce checks run id, sent one input, inputID (whose message
// is text), across a SIGKILL: another process took the run over, and it
// completed (the fake model refuses a history out of order, so a run that
// completes sent only valid ones) with answer want; inputID is its only
// input, applied; its log is gapless, each event as openapi.yaml describes
// it, with one input.accepted and one input.applied, both of inputID; and
// its conversation holds text once, as a user message after the run's
// first and before its answer, each tool call answered at once. It returns
// the run's log.
func (e *steerEnv) checkSteeredOnce(t *testing.T, c *client.Client, id, inputID, text, want string) []agentd.Event {
	t.Helper()
	ctx := testCtx(t)
	run, err := c.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != agentd.StatusCompleted {
		t.Errorf("run %s is %s (%v, %+v), want completed", id, run.Status, run.TerminalReason, run.Error)
	} else if run.OutputText == nil || *run.OutputText != want {
		t.Errorf("run answered %v, want %q (the steer's directive)", run.OutputText, want)
	}
	if r, err := e.store.RunGet(context.Background(), "default", id); err != nil || r.Epoch < 2 {
		t.Errorf("run epoch %d (%v), want 2 or more: the process started after the kill took the run over", r.Epoch, err)
	}
	if run.InputsPending != 0 || run.InputsUnapplied != 0 {
		t.Errorf("run has %d inputs pending and %d unapplied, want none", run.InputsPending, run.InputsUnapplied)
	}
	ins, err := c.ListInputs(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins) != 1 || ins[0].ID != inputID || ins[0].Status != agentd.InputApplied || ins[0].Step == nil || ins[0].N != 1 {
		t.Errorf("inputs %+v; want %s alone, applied", ins, inputID)
	}

	evs := e.storedEvents(t, id)
	spectest.CheckEvents(t, evs)
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Errorf("stored event %d has seq %d: the log has a gap", i, ev.Seq)
			break
		}
	}
	counts := inputEvents(t, evs)
	accepted, applied := counts[agentd.EventInputAccepted], counts[agentd.EventInputApplied]
	if len(accepted) != 1 || accepted[inputID] != 1 || len(applied) != 1 || applied[inputID] != 1 || len(counts[agentd.EventInputUnapplied]) != 0 {
		t.Errorf("input events %v; want one input.accepted and one input.applied, of %s", counts, inputID)
	}

	page, err := c.Messages(ctx, run.ConversationID, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	msgs := page.Data
	lines := transcript(msgs)
	checkTurnOrder(t, msgs)
	steer, firstUser, answer := -1, -1, -1
	seen := 0
	for i, m := range msgs {
		if m.Role == agentd.RoleUser && firstUser < 0 {
			firstUser = i
		}
		if m.Role == agentd.RoleUser && m.Text() == text {
			seen++
			steer = i
		}
		if m.Role == agentd.RoleAssistant && m.Status == agentd.MessageCompleted && m.Text() != "" {
			answer = i
		}
	}
	switch {
	case seen != 1:
		t.Errorf("the conversation holds the steer's message %d times, want once:\n%s", seen, strings.Join(lines, "\n"))
	case steer <= firstUser || answer != len(msgs)-1 || msgs[answer].Text() != want || steer > answer:
		t.Errorf("the conversation is out of turn (steer at %d, first user message at %d, answer at %d of %d):\n%s",
			steer, firstUser, answer, len(msgs), strings.Join(lines, "\n"))
	}
	if t.Failed() {
		t.Logf("events: %s", eventTypes(evs))
	}
	t.Logf("conversation: %s", strings.Join(lines, " | "))
	return evs
}

// killingProxy forwards to an agentd process, and kills it (SIGKILL) once
// it has answered the first POST /runs/{id}/input, before that answer
// reaches the client, whose connection it then breaks: the client never
// sees the 202. It waits for Switch (to the process that takes over)
// before breaking it, so that the client's retry goes there.
type killingProxy struct {
	URL string

	mu       sync.Mutex
	target   *url.URL
	victim   *child
	status   int           // the status the victim answered the input with
	killed   chan struct{} // closed once the victim is killed
	switched chan struct{} // closed by Switch
	once     sync.Once
}

var errKilled = errors.New("the process was killed before its answer was sent")

func newKillingProxy(t *testing.T, victim *child) *killingProxy {
	t.Helper()
	p := &killingProxy{victim: victim, killed: make(chan struct{}), switched: make(chan struct{})}
	p.target, _ = url.Parse("http://" + victim.addr)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			p.mu.Lock()
			r.SetURL(p.target)
			p.mu.Unlock()
		},
		ModifyResponse: p.modify,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			panic(http.ErrAbortHandler) // the connection breaks: no answer at all
		},
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(func() {
		p.Switch("") // a proxy still waiting lets go
		srv.Close()
	})
	p.URL = srv.URL
	return p
}

func (p *killingProxy) modify(resp *http.Response) error {
	r := resp.Request
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/input") {
		return nil
	}
	first := false
	p.once.Do(func() { first = true })
	if !first {
		return nil
	}
	p.mu.Lock()
	p.status = resp.StatusCode
	p.mu.Unlock()
	_ = p.victim.cmd.Process.Signal(syscall.SIGKILL)
	<-p.victim.done
	close(p.killed)
	<-p.switched
	resp.Body.Close()
	return errKilled
}

// Switch forwards to addr from now on ("": stays as is) and lets the
// answer being held go, broken.
func (p *killingProxy) Switch(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if addr != "" {
		p.target, _ = url.Parse("http://" + addr)
	}
	select {
	case <-p.switched:
	default:
		close(p.switched)
	}
}

// victimStatus is the status the killed process answered the input with.
func (p *killingProxy) victimStatus() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}
