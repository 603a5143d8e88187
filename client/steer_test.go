package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestSteerRequests: the requests SteerRun, ListInputs and SendMessage
// send (method, path, Idempotency-Key, body), and what they read of the
// answers, against a recording server.
func TestSteerRequests(t *testing.T) {
	t.Parallel()
	type sent struct{ method, path, key, body string }
	var mu sync.Mutex
	var got []sent
	answers := map[string]string{
		"POST /runs/r1/input": `{"id":"i1","object":"run.input","run_id":"r1","n":2,"source":"client","when":"now","status":"pending",` +
			`"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"step":null,"reason":null,"carried_to":null,` +
			`"created_by":null,"created_at":"2026-01-02T03:04:05Z","applied_at":null}`,
		"GET /runs/r1/inputs": `{"object":"list","data":[{"id":"i0","object":"run.input","run_id":"r1","n":1,"source":"client","when":"next",` +
			`"status":"applied","messages":[],"step":3,"reason":null,"carried_to":null,"created_by":null,"created_at":"2026-01-02T03:04:05Z",` +
			`"applied_at":"2026-01-02T03:04:06Z"}]}`,
		"POST /conversations/c1/messages": `{"object":"conversation.send","action":"started","run":{"id":"r2","conversation_id":"c1"},"input":null}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, sent{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), string(b)})
		mu.Unlock()
		if r.URL.Path == "/runs/ended/input" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"status":409,"code":"run_ended","detail":"send it to its conversation","conversation_id":"c1"}`))
			return
		}
		answer, ok := answers[r.Method+" "+r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte(answer))
	}))
	defer srv.Close()
	c := client.New(srv.URL)
	ctx := context.Background()

	in, err := c.SteerRun(ctx, "r1", client.SteerInput{Text: "hi", When: agentd.InputNow, IdempotencyKey: "k-steer"})
	if err != nil || in.ID != "i1" || in.N != 2 || in.Status != agentd.InputPending || in.When != agentd.InputNow ||
		len(in.Messages) != 1 || agentd.TextOf(in.Messages[0].Content) != "hi" || in.Step != nil {
		t.Fatalf("SteerRun: %+v %v", in, err)
	}
	if _, err := c.SteerRun(ctx, "r1", client.SteerInput{Messages: []client.InputMessage{{Content: "see",
		Parts: []client.InputPart{client.ImageURL("https://example.com/a.png", "")}}}}); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListInputs(ctx, "r1")
	if err != nil || len(list) != 1 || list[0].ID != "i0" || list[0].Status != agentd.InputApplied || list[0].Step == nil || *list[0].Step != 3 ||
		list[0].AppliedAt == nil {
		t.Fatalf("ListInputs: %+v %v", list, err)
	}
	newRun := &client.CreateRun{Model: "fake", ConversationID: "elsewhere", Input: "not this", Webhook: &client.RunWebhook{URL: "https://example.com/hook"},
		Wait: time.Second, IdempotencyKey: "not sent"}
	s, err := c.SendMessage(ctx, "c1", client.SendMessage{Input: "again", IdempotencyKey: "k-send", NewRun: newRun})
	if err != nil || s.Action != agentd.SendStarted || s.Run.ID != "r2" || s.Input != nil {
		t.Fatalf("SendMessage: %+v %v", s, err)
	}
	if _, err := c.SendMessage(ctx, "c1", client.SendMessage{Input: "plain", When: agentd.InputNext}); err != nil {
		t.Fatal(err)
	}
	_, err = c.SteerRun(ctx, "ended", client.SteerInput{Text: "late"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Code != "run_ended" || apiErr.ConversationID != "c1" {
		t.Fatalf("input to an ended run: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	want := []sent{
		{"POST", "/runs/r1/input", "k-steer", `{"input":"hi","when":"now"}`},
		{"POST", "/runs/r1/input", "", `{"input":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image","url":"https://example.com/a.png"}]}]}`},
		{"GET", "/runs/r1/inputs", "", ``},
		{"POST", "/conversations/c1/messages", "k-send", `{"model":"fake","input":"again"}`},
		{"POST", "/conversations/c1/messages", "", `{"input":"plain","when":"next"}`},
		{"POST", "/runs/ended/input", "", `{"input":"late"}`},
	}
	if len(got) != len(want) {
		t.Fatalf("the requests: %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if g.method != w.method || g.path != w.path || (w.key != "" && g.key != w.key) || (w.key == "" && w.method == "POST" && g.key == "") ||
			(w.body == "" && g.body != "") || (w.body != "" && !jsonEqual([]byte(g.body), []byte(w.body))) {
			t.Errorf("request %d: %+v, want %+v", i, g, w)
		}
	}
}

// firstDelta follows run id until its first message.delta, and returns
// the events so far; it fails when the run ends first.
func firstDelta(t *testing.T, c *client.Client, id string) []client.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var evs []client.Event
	for ev, err := range c.Events(ctx, id, 0) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if ev.Type == agentd.EventMessageDelta {
			return evs
		}
	}
	t.Fatalf("run %s ended without streaming: %+v", id, evs)
	return nil
}

// payloadOf is the data of the first event of evs of type T, and whether
// there is one.
func payloadOf[T agentd.Payload](t *testing.T, evs []client.Event) (T, int, bool) {
	t.Helper()
	var zero T
	for i, ev := range evs {
		if ev.Type != zero.EventType() {
			continue
		}
		p, err := ev.Payload()
		if err != nil {
			t.Fatalf("event %d (%s): %v", ev.Seq, ev.Type, err)
		}
		d, ok := p.(T)
		if !ok {
			t.Fatalf("event %d (%s) decodes as %#v", ev.Seq, ev.Type, p)
		}
		return d, i, true
	}
	return zero, -1, false
}

// TestSteerRun: against a real server, input sent while the run streams
// its answer is accepted pending, once for a key sent twice, shown on the
// run's stream as accepted then applied, and answered by the run, which
// goes on after the answer it was about to end with; its message is in
// the conversation before that answer. An ended run refuses input,
// naming its conversation; a missing run is a 404, a bad input a 422
// naming its field.
func TestSteerRun(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	base := "http://" + addr
	ctx := context.Background()
	c := client.New(base)

	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/stream 40 50"})
	if err != nil {
		t.Fatal(err)
	}
	evs := firstDelta(t, c, run.ID)
	in, err := c.SteerRun(ctx, run.ID, client.SteerInput{Text: "/say steered", IdempotencyKey: "k-steer-1"})
	if err != nil {
		t.Fatal(err)
	}
	if in.Object != agentd.ObjectInput || in.RunID != run.ID || in.N != 1 || in.Source != agentd.InputFromClient || in.When != agentd.InputNext ||
		in.Status != agentd.InputPending || len(in.Messages) != 1 || in.Messages[0].Role != agentd.RoleUser ||
		agentd.TextOf(in.Messages[0].Content) != "/say steered" || in.Step != nil || in.AppliedAt != nil {
		t.Fatalf("the input: %+v", in)
	}
	again, err := c.SteerRun(ctx, run.ID, client.SteerInput{Text: "/say steered", IdempotencyKey: "k-steer-1"})
	if err != nil || again.ID != in.ID || again.N != 1 {
		t.Fatalf("the same key again: %+v %v, want input %s", again, err, in.ID)
	}
	for ev, err := range c.Events(ctx, run.ID, evs[len(evs)-1].Seq) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	done, err := c.WaitRun(ctx, run.ID, 10*time.Second)
	if err != nil || done.Status != agentd.StatusCompleted || done.OutputText == nil || *done.OutputText != "steered" || done.InputsPending != 0 {
		t.Fatalf("the steered run: %+v %v", done, err)
	}
	accepted, ai, ok := payloadOf[agentd.InputAcceptedData](t, evs)
	if !ok || accepted.InputID != in.ID || accepted.N != 1 || accepted.When != agentd.InputNext || accepted.Source != agentd.InputFromClient ||
		len(accepted.Messages) != 1 || agentd.TextOf(accepted.Messages[0].Content) != "/say steered" {
		t.Fatalf("input.accepted: %+v (%v)", accepted, ok)
	}
	applied, pi, ok := payloadOf[agentd.InputAppliedData](t, evs)
	if !ok || applied.InputID != in.ID || applied.N != 1 || len(applied.MessageIDs) != 1 || pi < ai {
		t.Fatalf("input.applied (event %d, accepted %d): %+v (%v)", pi, ai, applied, ok)
	}
	n := 0
	for _, ev := range evs {
		if ev.Type == agentd.EventInputAccepted {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d input.accepted for one input sent twice under one key", n)
	}
	// The streamed answer was not cut: it was the first step's answer,
	// and the run answered the input after it.
	var text strings.Builder
	for _, ev := range evs {
		if p, err := ev.Payload(); err == nil {
			if d, ok := p.(agentd.MessageDeltaData); ok {
				text.WriteString(d.Text)
			}
		}
	}
	if !strings.HasPrefix(text.String(), "tok1 tok2") || !strings.Contains(text.String(), "tok40") {
		t.Fatalf("the streamed text: %q", text.String())
	}

	list, err := c.ListInputs(ctx, run.ID)
	if err != nil || len(list) != 1 || list[0].ID != in.ID || list[0].Status != agentd.InputApplied || list[0].Step == nil ||
		*list[0].Step < 2 || list[0].AppliedAt == nil {
		t.Fatalf("the run's inputs: %+v %v", list, err)
	}
	shape := sameShape[struct {
		Object string         `json:"object,omitempty"` // "list", or none as in the other lists
		Data   []client.Input `json:"data"`
	}](t, base, "/runs/"+run.ID+"/inputs")
	if (shape.Object != "list" && shape.Object != "") || len(shape.Data) != 1 || shape.Data[0].ID != in.ID {
		t.Fatalf("GET /runs/{id}/inputs: %+v", shape)
	}
	msgs, err := c.Messages(ctx, run.ConversationID, 20, "")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	steeredAt := -1
	for i, m := range msgs.Data {
		texts = append(texts, string(m.Role)+": "+m.Text())
		if m.ID == applied.MessageIDs[0] {
			steeredAt = i
		}
	}
	if len(msgs.Data) != 4 || steeredAt != 2 || texts[2] != "user: /say steered" || texts[3] != "assistant: steered" ||
		!strings.HasPrefix(texts[1], "assistant: tok1 ") {
		t.Fatalf("the conversation (the input's message at %d): %q", steeredAt, texts)
	}

	// An ended run takes no input: its conversation does.
	_, err = c.SteerRun(ctx, run.ID, client.SteerInput{Text: "late"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || apiErr.Code != "run_ended" || apiErr.ConversationID != run.ConversationID ||
		!strings.Contains(apiErr.Detail, run.ConversationID) {
		t.Fatalf("input to an ended run: %v", err)
	}
	if _, err := c.SteerRun(ctx, "01a23158-24d0-755c-8953-5268112791c4", client.SteerInput{Text: "x"}); !client.IsCode(err, "run_not_found") {
		t.Fatalf("input to a missing run: %v", err)
	}
	if _, err := c.ListInputs(ctx, "01a23158-24d0-755c-8953-5268112791c4"); !client.IsCode(err, "run_not_found") {
		t.Fatalf("the inputs of a missing run: %v", err)
	}
	slow, err := c.CreateRun(ctx, client.CreateRun{Input: "/stream 100 50"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		in    client.SteerInput
		field string
	}{
		{client.SteerInput{Text: ""}, "input"},
		{client.SteerInput{Text: "x", When: "later"}, "when"},
	} {
		_, err := c.SteerRun(ctx, slow.ID, bad.in)
		if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnprocessableEntity || apiErr.Field != bad.field {
			t.Errorf("input %+v: %v, want a 422 naming %s", bad.in, err, bad.field)
		}
	}
	if _, err := c.CancelRun(ctx, slow.ID); err != nil {
		t.Fatal(err)
	}
}

// TestSteerNow: input sent with when now cuts the answer under way: the
// streamed text is retracted, and the model is asked again with the
// input, so the whole first answer never streams.
func TestSteerNow(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	ctx := context.Background()
	c := client.New("http://" + addr)

	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/stream 100 50"})
	if err != nil {
		t.Fatal(err)
	}
	evs := firstDelta(t, c, run.ID)
	in, err := c.SteerRun(ctx, run.ID, client.SteerInput{Text: "/say cut short", When: agentd.InputNow})
	if err != nil || in.When != agentd.InputNow {
		t.Fatalf("the input: %+v %v", in, err)
	}
	for ev, err := range c.Events(ctx, run.ID, evs[len(evs)-1].Seq) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	done, err := c.GetRun(ctx, run.ID)
	if err != nil || done.Status != agentd.StatusCompleted || done.OutputText == nil || *done.OutputText != "cut short" {
		t.Fatalf("the run: %+v %v", done, err)
	}
	retracted, _, ok := payloadOf[agentd.StepRetractedData](t, evs)
	if !ok || retracted.Reason != agentd.RetractedSteered {
		t.Fatalf("step.retracted: %+v (%v)", retracted, ok)
	}
	for _, ev := range evs {
		if p, err := ev.Payload(); err == nil {
			if d, ok := p.(agentd.MessageDeltaData); ok && strings.Contains(d.Text, "tok100") {
				t.Fatal("the answer the input cut streamed whole")
			}
		}
	}
}

// TestSendMessage: a message to a conversation with no run in flight
// starts its next run (201, no input); one sent while a run is in flight
// steers it (202, with the input), and the run answers it; a key sent
// again answers what the first call did; POST /runs with if_busy steer
// sends its input to the run in flight.
func TestSendMessage(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	ctx := context.Background()
	c := client.New("http://" + addr)

	first, err := c.CreateRun(ctx, client.CreateRun{Input: "/say first", Instructions: "Be brief.", Wait: 10 * time.Second})
	if err != nil || first.Status != agentd.StatusCompleted {
		t.Fatalf("the first run: %+v %v", first, err)
	}
	conv := first.ConversationID

	started, err := c.SendMessage(ctx, conv, client.SendMessage{Input: "/stream 40 50", IdempotencyKey: "k-send-1"})
	if err != nil || started.Object != "conversation.send" || started.Action != agentd.SendStarted || started.Input != nil ||
		started.Run.ID == first.ID || started.Run.ConversationID != conv || deref(started.Run.Instructions) != "Be brief." {
		t.Fatalf("a message to an idle conversation: %+v %v", started, err)
	}
	replay, err := c.SendMessage(ctx, conv, client.SendMessage{Input: "/stream 40 50", IdempotencyKey: "k-send-1"})
	if err != nil || replay.Action != agentd.SendStarted || replay.Run.ID != started.Run.ID {
		t.Fatalf("the same key again: %+v %v, want run %s", replay, err, started.Run.ID)
	}
	firstDelta(t, c, started.Run.ID)
	steered, err := c.SendMessage(ctx, conv, client.SendMessage{Input: "/say second"})
	if err != nil || steered.Action != agentd.SendSteered || steered.Run.ID != started.Run.ID || steered.Input == nil ||
		steered.Input.RunID != started.Run.ID || steered.Input.Status != agentd.InputPending || steered.Run.InputsPending < 1 {
		t.Fatalf("a message while a run is in flight: %+v %v", steered, err)
	}
	// POST /runs with if_busy steer, while the same run is in flight.
	busy, err := c.CreateRun(ctx, client.CreateRun{Input: "/say third", ConversationID: conv, IfBusy: agentd.IfBusySteer})
	if err != nil || busy.ID != started.Run.ID {
		t.Fatalf("if_busy steer: %+v %v, want run %s", busy, err, started.Run.ID)
	}
	done, err := c.WaitRun(ctx, started.Run.ID, 10*time.Second)
	if err != nil || done.Status != agentd.StatusCompleted || done.OutputText == nil || *done.OutputText != "third" {
		t.Fatalf("the steered run: %+v %v", done, err)
	}
	list, err := c.ListInputs(ctx, started.Run.ID)
	if err != nil || len(list) != 2 || list[0].ID != steered.Input.ID || list[0].N != 1 || list[1].N != 2 ||
		agentd.TextOf(list[1].Messages[0].Content) != "/say third" || list[0].Status != agentd.InputApplied || list[1].Status != agentd.InputApplied {
		t.Fatalf("the run's inputs: %+v %v", list, err)
	}
	page, err := c.ListRuns(ctx, client.ListRuns{ConversationID: conv})
	if err != nil || len(page.Data) != 2 {
		t.Fatalf("the conversation's runs: %+v %v", page, err)
	}
	// A conversation that has had no run starts one from NewRun.
	empty, err := c.CreateConversation(ctx, "empty", nil)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := c.SendMessage(ctx, empty.ID, client.SendMessage{Input: "/system", NewRun: &client.CreateRun{Instructions: "Answer in verse."}})
	if err != nil || fresh.Action != agentd.SendStarted || fresh.Run.ConversationID != empty.ID {
		t.Fatalf("a message to an empty conversation: %+v %v", fresh, err)
	}
	if r, err := c.WaitRun(ctx, fresh.Run.ID, 10*time.Second); err != nil || r.OutputText == nil || *r.OutputText != "Answer in verse." {
		t.Fatalf("the run of an empty conversation: %+v %v", r, err)
	}
	if _, err := c.SendMessage(ctx, "01a23158-24d0-755c-8953-5268112791c4", client.SendMessage{Input: "x"}); !client.IsCode(err, "conversation_not_found") {
		t.Fatalf("a message to a missing conversation: %v", err)
	}
}

func deref[T ~string](s *T) string {
	if s == nil {
		return ""
	}
	return string(*s)
}
