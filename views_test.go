package agentd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// storedErrors are error details as the store writes them: of every kind,
// with and without the optional fields, with text that JSON escapes.
func storedErrors() []agentd.ErrorDetail {
	out := []agentd.ErrorDetail{{Message: "the run's total timeout elapsed"}, {Message: ""}}
	kinds := append(agentd.ToolErrorKinds(), agentd.RunErrorKinds()...)
	for i, k := range kinds {
		e := agentd.ErrorDetail{Kind: k, Message: "<b>" + string(k) + "</b> & é \u2028 \"quoted\"\n"}
		if i%2 == 0 {
			e.Status = 500 + i
		}
		if i%3 == 0 {
			e.ProviderCode, e.ProviderMessage, e.ProviderType = "invalid_api_key", "Incorrect API key: sk-…", "invalid_request_error"
		}
		out = append(out, e)
	}
	return out
}

// storedActions are required actions as the store writes them, of every
// type.
func storedActions() []agentd.RequiredAction {
	args := json.RawMessage(`{"zz":[1,2.50,1e2,"<x>"],"a":{"k":null,"b":true}}`)
	return []agentd.RequiredAction{
		{Arguments: args, CallID: "call_0_0", IdempotencyKey: "r:1:call_0_0", Name: "send", Step: 1, ToolCallID: "t1", Type: agentd.ActionToolApproval},
		{Arguments: json.RawMessage(`null`), CallID: "c", IdempotencyKey: "r:2:c", Name: "charge", Step: 2, ToolCallID: "t2", Type: agentd.ActionToolOutcomeUnknown},
		{Arguments: json.RawMessage(`{}`), CallID: "c1", IdempotencyKey: "r:3:c1", Name: "ask", Step: 3, ToolCallID: "t3", Type: agentd.ActionClientToolCalls,
			Calls: []agentd.ClientCall{{Arguments: args, CallID: "c1", Name: "ask", ToolCallID: "t3"}, {Arguments: json.RawMessage(`"é"`), CallID: "c2", Name: "pick", ToolCallID: "t4"}}},
	}
}

// jsonbText is what PostgreSQL's jsonb column gives back for b, as the
// store reads it: its keys reordered and its text respaced.
func jsonbText(t *testing.T, conn *pgx.Conn, b []byte) []byte {
	t.Helper()
	var out []byte
	if err := conn.QueryRow(context.Background(), `SELECT $1::jsonb`, b).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameJSON reports whether a and b are the same JSON value, numbers
// compared as written.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	for _, p := range []struct {
		in  []byte
		out *any
	}{{a, &x}, {b, &y}} {
		dec := json.NewDecoder(bytes.NewReader(p.in))
		dec.UseNumber()
		if err := dec.Decode(p.out); err != nil {
			t.Fatalf("%s: %v", p.in, err)
		}
	}
	return reflect.DeepEqual(x, y)
}

// TestStoredColumnsReadBackTheSame: a run's required_action and the error
// of a run, step, call or attempt are written as the domain's types and
// stored as jsonb; read back through PostgreSQL into the typed fields of
// the views, they encode to the same JSON as the column holds (what the
// API answered when it passed the column on raw), and an error detail to
// the very bytes it was written as (jsonb's key order undone).
func TestStoredColumnsReadBackTheSame(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, persisttest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	check := func(written []byte, into any) []byte {
		t.Helper()
		column := jsonbText(t, conn, written)
		raw, err := json.Marshal(json.RawMessage(column)) // the API's answer of the column, raw
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(column, into); err != nil {
			t.Fatalf("%s does not decode into %T: %v", column, into, err)
		}
		typed, err := json.Marshal(into)
		if err != nil {
			t.Fatal(err)
		}
		if !sameJSON(t, raw, typed) {
			t.Fatalf("stored %s reads back as\n%s\nnot\n%s", written, typed, raw)
		}
		return typed
	}
	reordered := false
	for _, e := range storedErrors() {
		written, _ := json.Marshal(e)
		typed := check(written, &agentd.ErrorDetail{})
		if !bytes.Equal(typed, written) {
			t.Fatalf("error detail written as\n%s\nreads back as\n%s", written, typed)
		}
		reordered = reordered || !bytes.Equal(jsonbText(t, conn, written), written)
	}
	for _, a := range storedActions() {
		written, _ := json.Marshal(a)
		check(written, &agentd.RequiredAction{})
	}
	if !reordered {
		t.Fatal("jsonb kept every error detail as written: the test proved nothing about reading it back")
	}
}

// TestViewsShowEveryKey: the views' fields are never left out of their
// JSON (no omitempty), so that every object of a kind has the same keys
// and an absent value is null.
func TestViewsShowEveryKey(t *testing.T) {
	t.Parallel()
	for _, v := range []any{agentd.RunView{}, agentd.StepView{}, agentd.ToolCallView{}, agentd.AttemptView{},
		agentd.ConversationView{}, agentd.MessageView{}, agentd.ToolView{}, agentd.List[int]{}, agentd.Page[int]{},
		agentd.ScheduleView{}, agentd.ScheduleOutcome{}, agentd.DatasetView{}, agentd.CaseView{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || opts != "" {
				t.Errorf("%s.%s has json tag %q", typ.Name(), f.Name, f.Tag.Get("json"))
			}
		}
	}
}

// TestRunViewEnded: a run has ended, for its SDK's readers, exactly when
// its status says it stopped.
func TestRunViewEnded(t *testing.T) {
	t.Parallel()
	for _, s := range agentd.RunStatuses() {
		if got := (agentd.RunView{Status: s}).Ended(); got != s.Stopped() {
			t.Errorf("a %s run: Ended %v", s, got)
		}
	}
	if !(agentd.RunView{Status: agentd.StatusInterrupted}).Ended() || (agentd.RunView{Status: agentd.StatusRequiresAction}).Ended() {
		t.Error("interrupted runs have ended, waiting ones have not")
	}
	m := agentd.MessageView{Content: []agentd.Part{{Type: agentd.PartText, Text: "a"}, {Type: agentd.PartToolCall, Name: "n"},
		{Type: agentd.PartText, Text: "b"}}}
	if m.Text() != "a\nb" {
		t.Errorf("the message's text is %q", m.Text())
	}
}
