package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/stream"
)

// wsSetup starts the API with event streams over a running engine whose
// model is the fake; opts adjust the config.
func wsSetup(t *testing.T, opts ...func(*api.Config)) *bundle {
	t.Helper()
	hub := stream.New(stream.Config{Heartbeat: time.Hour})
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), Publisher: hub})
	hub.Bind(store)
	if err := hub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	fs := httptest.NewServer(fakellm.New())
	t.Cleanup(fs.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	reg := registry(t)
	e := run.New(run.Config{Store: store, Tools: reg, Workers: 4, LeaseTTL: 5 * time.Second, PollInterval: 100 * time.Millisecond,
		Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fs.URL + "/v1", APIKey: "test", HTTPClient: &http.Client{Transport: tr}})})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Store: store, Runs: e.Service(), Events: hub, Tools: reg,
		Registerer: prometheus.NewRegistry(), Defaults: api.RunDefaults{Model: "test-model"}}
	for _, o := range opts {
		o(&cfg)
	}
	srv := httptest.NewServer(api.New(cfg))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
		_ = hub.Stop(ctx)
	})
	return &bundle{t: t, store: store, srv: srv}
}

// wsClient is a test's socket.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
}

func (b *bundle) dial() *wsClient {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.srv.URL, "http")+"/v1/responses", nil)
	if err != nil {
		b.t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(1 << 22)
	b.t.Cleanup(func() { _ = conn.CloseNow() })
	return &wsClient{t: b.t, conn: conn}
}

// send writes one client message.
func (c *wsClient) send(msg string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

// wsEvent is a server event as the tests read it.
type wsEvent struct {
	raw      []byte
	Type     string
	Seq      *int   `json:"sequence_number"`
	StreamID string `json:"stream_id"`
	Delta    string
	Status   int
	Error    struct{ Type, Code, Message, Param string }
	Steer    struct {
		ID                 string
		PreviousResponseID string `json:"previous_response_id"`
	}
	Response struct {
		ID, Status         string
		PreviousResponseID *string `json:"previous_response_id"`
		Output             []struct {
			Type    string
			Content []struct{ Text string }
		}
	}
}

// text is the text of the response's output messages, joined by "|".
func (e wsEvent) text() string {
	var out []string
	for _, it := range e.Response.Output {
		for _, c := range it.Content {
			out = append(out, c.Text)
		}
	}
	return strings.Join(out, "|")
}

// next reads the next server event.
func (c *wsClient) next() wsEvent {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	typ, b, err := c.conn.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	if typ != websocket.MessageText {
		c.t.Fatalf("a binary frame: %q", b)
	}
	var e wsEvent
	if err := json.Unmarshal(b, &e); err != nil {
		c.t.Fatalf("frame %q: %v", b, err)
	}
	e.raw = b
	return e
}

// until reads events until one of type typ (on lane, when given), and
// returns all of them.
func (c *wsClient) until(typ string) []wsEvent {
	c.t.Helper()
	var evs []wsEvent
	for {
		e := c.next()
		evs = append(evs, e)
		if e.Type == typ {
			return evs
		}
	}
}

// terminal says that typ ends a response's stream.
func terminal(typ string) bool {
	return typ == "response.completed" || typ == "response.incomplete" || typ == "response.failed"
}

// TestResponsesSocketMultiplexAndChain: two responses on two lanes of one
// socket stream side by side, each event naming its lane, each stream
// numbered from 0 without a gap; a response.create with
// previous_response_id on a lane continues the response before it.
func TestResponsesSocketMultiplexAndChain(t *testing.T) {
	t.Parallel()
	b := wsSetup(t)
	c := b.dial()
	c.send(`{"type":"response.create","stream_id":"a","model":"m","input":"/stream 8 100\n/say alpha beta gamma delta"}`)
	c.send(`{"type":"response.create","stream_id":"b","model":"m","input":"/stream 8 100\n/say one two three four"}`)
	seqs := map[string][]int{}
	final := map[string]wsEvent{}
	order := []string{}
	for len(final) < 2 {
		e := c.next()
		if e.StreamID != "a" && e.StreamID != "b" {
			t.Fatalf("an event without its lane: %s", e.raw)
		}
		seqs[e.StreamID] = append(seqs[e.StreamID], *e.Seq)
		order = append(order, e.StreamID)
		if terminal(e.Type) {
			final[e.StreamID] = e
		}
	}
	for lane, ns := range seqs {
		for i, n := range ns {
			if n != i {
				t.Fatalf("lane %s: sequence numbers %v", lane, ns)
			}
		}
	}
	// Side by side: the lane that ended first did not end before the
	// other one began.
	if half := strings.Join(order[:len(order)/2], ""); !strings.Contains(half, "a") || !strings.Contains(half, "b") {
		t.Fatalf("the lanes ran one after the other: %v", order)
	}
	if got := final["a"].text(); got != "alpha beta gamma delta" || final["a"].Response.Status != "completed" {
		t.Fatalf("lane a: %s", final["a"].raw)
	}
	if got := final["b"].text(); got != "one two three four" {
		t.Fatalf("lane b: %s", final["b"].raw)
	}
	first := final["a"].Response.ID
	c.send(`{"type":"response.create","stream_id":"a","model":"m","previous_response_id":"` + first + `","input":"/say chained"}`)
	c.send(`{"type":"response.create","stream_id":"a","model":"m","previous_response_id":"` + first + `","input":"/say too late"}`)
	evs := c.until("response.completed")
	last := evs[len(evs)-1]
	if last.text() != "chained" || last.Response.PreviousResponseID == nil || *last.Response.PreviousResponseID != first {
		t.Fatalf("the chained response: %s", last.raw)
	}
	// The lane served the second create after the first ended: first is
	// no longer the latest response of its conversation, so the second
	// continues a fork of it.
	evs = c.until("response.completed")
	fork := evs[len(evs)-1]
	if fork.text() != "too late" || fork.StreamID != "a" || fork.Response.PreviousResponseID == nil || *fork.Response.PreviousResponseID != first ||
		convOf(t, b, fork.Response.ID) == convOf(t, b, first) {
		t.Fatalf("a create from a response that is not the latest: %s", fork.raw)
	}
	list := want[struct{ Data []struct{ Role string } }](t, b.do("GET", "/conversations/"+convOf(t, b, first)+"/messages", ""), http.StatusOK)
	if len(list.Data) != 4 {
		t.Fatalf("the chained conversation has %d messages, want 4", len(list.Data))
	}
}

// convOf is the conversation of response id.
func convOf(t *testing.T, b *bundle, id string) string {
	t.Helper()
	r := want[struct {
		ConversationID string `json:"conversation_id"`
	}](t, b.do("GET", "/runs/"+strings.TrimPrefix(id, "resp_"), ""), http.StatusOK)
	return r.ConversationID
}

// TestResponsesSocketSteer: a response.steer sent while an answer streams
// is accepted once committed, and applied at the next step boundary of the
// same response: its output then holds the streamed answer and the answer
// to the steering input.
func TestResponsesSocketSteer(t *testing.T) {
	t.Parallel()
	b := wsSetup(t)
	c := b.dial()
	c.send(`{"type":"response.create","model":"m","input":"/stream 20 50"}`)
	evs := c.until("response.output_text.delta")
	id := evs[0].Response.ID
	c.send(`{"type":"response.steer","previous_response_id":"` + id + `","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"/say steered"}]}]}`)
	var accepted wsEvent
	var final wsEvent
	for final.Type == "" {
		e := c.next()
		switch {
		case e.Type == "response.steer.accepted":
			accepted = e
		case e.Type == "response.steer.failed":
			t.Fatalf("steer failed: %s", e.raw)
		case terminal(e.Type):
			final = e
		}
	}
	if !strings.HasPrefix(accepted.Steer.ID, "steer_") || accepted.Steer.PreviousResponseID != id || accepted.Seq == nil || *accepted.Seq < 1 {
		t.Fatalf("accepted: %s", accepted.raw)
	}
	if final.Response.Status != "completed" || !strings.HasSuffix(final.text(), "|steered") || !strings.HasPrefix(final.text(), "tok1 tok2") {
		t.Fatalf("the steered response: %s", final.raw)
	}
	// The input is the run's, applied.
	ins := want[struct{ Data []struct{ Status string } }](t, b.do("GET", "/runs/"+strings.TrimPrefix(id, "resp_")+"/inputs", ""), http.StatusOK)
	if len(ins.Data) != 1 || ins.Data[0].Status != "applied" {
		t.Fatalf("inputs: %+v", ins.Data)
	}
	// A response cancelled before it applied a steer's input: the steer
	// fails once the response ended, with its id and input.
	c.send(`{"type":"response.create","model":"m","input":"/stream 30 100"}`)
	id2 := c.until("response.output_text.delta")[0].Response.ID
	c.send(`{"type":"response.steer","previous_response_id":"` + id2 + `","input":"/say never"}`)
	acc := c.until("response.steer.accepted")
	if r := b.do("POST", "/v1/responses/"+id2+"/cancel", ""); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	evs = c.until("response.steer.failed")
	failed := evs[len(evs)-1]
	if !terminal(evs[len(evs)-2].Type) || evs[len(evs)-2].Response.Status != "cancelled" {
		t.Fatalf("the steer failed before the response's end: %s", evs[len(evs)-2].raw)
	}
	if failed.Error.Code != "response_not_active" || failed.Steer.ID != acc[len(acc)-1].Steer.ID ||
		!strings.Contains(string(failed.raw), `"input":"/say never"`) {
		t.Fatalf("an unapplied steer: %s", failed.raw)
	}
	// A steer of a response that ended fails, with its input.
	c.send(`{"type":"response.steer","previous_response_id":"` + id + `","input":"/say again"}`)
	if e := c.next(); e.Type != "response.steer.failed" || e.Error.Code != "response_already_completed" || !strings.Contains(string(e.raw), `"input":"/say again"`) {
		t.Fatalf("a steer of an ended response: %s", e.raw)
	}
}

// TestResponsesSocketResume: a socket cut mid-answer leaves the response
// going; a new socket's response.retrieve, and GET
// /v1/responses/{id}?stream=true, resume it after the last event seen,
// with the same JSON, to its end.
func TestResponsesSocketResume(t *testing.T) {
	t.Parallel()
	b := wsSetup(t)
	c := b.dial()
	c.send(`{"type":"response.create","model":"m","input":"/stream 20 60"}`)
	var id string
	last := -1
	for deltas := 0; deltas < 3; {
		e := c.next()
		if e.Type == "response.created" {
			id = e.Response.ID
		}
		if e.Type == "response.output_text.delta" {
			deltas++
		}
		last = *e.Seq
	}
	_ = c.conn.CloseNow()

	c2 := b.dial()
	c2.send(fmt.Sprintf(`{"type":"response.retrieve","response_id":%q,"starting_after":%d,"stream_id":"again"}`, id, last))
	evs := c2.until("response.completed")
	if *evs[0].Seq != last+1 {
		t.Fatalf("resumed at %d, want %d", *evs[0].Seq, last+1)
	}
	final := evs[len(evs)-1]
	if final.text() != tokens(20) {
		t.Fatalf("resumed response: %s", final.raw)
	}
	// Over HTTP, the same events after the same point, the same JSON but
	// for the lane.
	r := b.do("GET", fmt.Sprintf("/v1/responses/%s?stream=true&starting_after=%d", id, last), "")
	var data []string
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" {
			data = append(data, d)
		}
	}
	if len(data) != len(evs) {
		t.Fatalf("HTTP resumed with %d events, the socket with %d", len(data), len(evs))
	}
	for i, e := range evs {
		var ws, sse map[string]any
		_ = json.Unmarshal(e.raw, &ws)
		_ = json.Unmarshal([]byte(data[i]), &sse)
		delete(ws, "stream_id")
		a, _ := json.Marshal(ws)
		bb, _ := json.Marshal(sse)
		if string(a) != string(bb) {
			t.Fatalf("event %d: socket %s, HTTP %s", i, a, bb)
		}
	}
}

// tokens is the fake's answer of /stream N without /say.
func tokens(n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tok%d", i+1)
	}
	return strings.Join(out, " ")
}

// TestResponsesSocketBadMessages: each bad message is answered with an
// error event naming what is wrong, and the socket goes on serving.
func TestResponsesSocketBadMessages(t *testing.T) {
	t.Parallel()
	b := wsSetup(t)
	c := b.dial()
	for _, tc := range []struct{ msg, param, code string }{
		{`not json`, "", api.CodeInvalidJSON},
		{`{"type":"response.cancel"}`, "type", ""},
		{`{"input":"hi"}`, "type", ""},
		{`{"type":"response.create","stream_id":7,"input":"hi"}`, "stream_id", ""},
		{`{"type":"response.create","stream":false,"input":"hi"}`, "stream", ""},
		{`{"type":"response.create","background":true,"input":"hi"}`, "background", ""},
		{`{"type":"response.create","generate":false,"input":"hi"}`, "generate", ""},
		{`{"type":"response.create","input":"hi","temperature":"hot"}`, "temperature", ""},
		{`{"type":"response.create","input":"hi","previous_response_id":"resp_00000000000000000000000000000000"}`, "previous_response_id", ""},
		{`{"type":"response.retrieve","response_id":"resp_nope"}`, "response_id", ""},
	} {
		c.send(tc.msg)
		e := c.next()
		if e.Type != "error" || e.Error.Message == "" || e.Error.Param != tc.param || (tc.code != "" && e.Error.Code != tc.code) || e.Status < 400 {
			t.Errorf("%s: %s", tc.msg, e.raw)
		}
	}
	c.send(`{"type":"response.steer","previous_response_id":"resp_00000000000000000000000000000000","input":[{"role":"assistant","content":"x"}]}`)
	if e := c.next(); e.Type != "response.steer.failed" || e.Error.Code != "invalid_input" || e.Error.Param != "input[0].role" {
		t.Errorf("a steer with an assistant message: %s", e.raw)
	}
	c.send(`{"type":"response.steer","previous_response_id":"resp_00000000000000000000000000000000","input":"x"}`)
	if e := c.next(); e.Type != "response.steer.failed" || e.Error.Code != "response_not_found" {
		t.Errorf("a steer of no response: %s", e.raw)
	}
	c.send(`{"type":"response.create","model":"m","input":"/say still here","store":false,"generate":true,"stream":true}`)
	evs := c.until("response.completed")
	if got := evs[len(evs)-1].text(); got != "still here" {
		t.Fatalf("after the errors: %s", evs[len(evs)-1].raw)
	}
	// GET without the upgrade is 426.
	if r := b.do("GET", "/v1/responses", ""); r.status != http.StatusUpgradeRequired {
		t.Fatalf("GET without upgrade: %d %s", r.status, r.body)
	}
	// A page of another origin opens no socket.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(b.srv.URL, "http")+"/v1/responses",
		&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"https://elsewhere.example"}}})
	if err == nil {
		_ = conn.CloseNow()
		t.Fatal("a socket from another origin was opened")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a socket from another origin: %v %v", resp, err)
	}
}

// TestResponsesSocketDrains: once the instance drains (its ready check
// says api.ErrDraining), its sockets close with 1001, the one streaming a
// response too, whose response goes on and is read to its end over HTTP.
func TestResponsesSocketDrains(t *testing.T) {
	t.Parallel()
	var draining atomic.Bool
	b := wsSetup(t, func(c *api.Config) {
		c.ReadyFunc = func(context.Context) error {
			if draining.Load() {
				return api.ErrDraining
			}
			return nil
		}
	})
	idle, busy := b.dial(), b.dial()
	busy.send(`{"type":"response.create","model":"m","input":"/stream 20 100"}`)
	id := busy.until("response.output_text.delta")[0].Response.ID
	draining.Store(true)
	for name, c := range map[string]*wsClient{"idle": idle, "busy": busy} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		for err == nil {
			_, _, err = c.conn.Read(ctx)
		}
		cancel()
		if websocket.CloseStatus(err) != websocket.StatusGoingAway {
			t.Errorf("%s socket: %v, want a close with 1001", name, err)
		}
	}
	r := b.do("GET", "/v1/responses/"+id+"?stream=true", "")
	if !strings.Contains(string(r.body), "event: response.completed") {
		t.Fatalf("the response after the drain: %s", r.body)
	}
}

// TestResponsesSocketRateLimited: a socket's creates and steers take the
// tenant's creation rate, as POST /v1/responses does: past it, an error
// event (429 rate_limited), and a steer fails with its input.
func TestResponsesSocketRateLimited(t *testing.T) {
	t.Parallel()
	b := wsSetup(t, func(c *api.Config) { c.Quotas = api.Quotas{CreatesPerSecond: 0.001, CreateBurst: 1} })
	c := b.dial()
	c.send(`{"type":"response.create","model":"m","input":"/say one"}`)
	evs := c.until("response.completed")
	id := evs[len(evs)-1].Response.ID
	c.send(`{"type":"response.create","model":"m","input":"/say two"}`)
	if e := c.next(); e.Type != "error" || e.Status != http.StatusTooManyRequests || e.Error.Code != "rate_limited" {
		t.Fatalf("a create past the rate: %s", e.raw)
	}
	c.send(`{"type":"response.steer","previous_response_id":"` + id + `","input":"x"}`)
	if e := c.next(); e.Type != "response.steer.failed" || e.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("a steer past the rate: %s", e.raw)
	}
}
