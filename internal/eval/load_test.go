package eval_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/eval"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/run"
	"github.com/agentd/agentd/internal/tools"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx pools and http keep-alive connections close asynchronously.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	)
}

// engine starts an engine on a database of the test's own, with the fake
// model and the calculator and clock, and returns its store.
func engine(t *testing.T) *persist.Store {
	t.Helper()
	store, _ := persisttest.New(t)
	fsrv := httptest.NewServer(fakellm.New())
	t.Cleanup(fsrv.Close)
	reg, err := tools.NewRegistry(tools.Calculator(), tools.Clock())
	if err != nil {
		t.Fatal(err)
	}
	e := run.New(run.Config{Store: store, Model: llm.NewOpenAI(llm.OpenAIConfig{BaseURL: fsrv.URL + "/v1", APIKey: "test"}),
		Tools: reg, LeaseTTL: 5 * time.Second, PollInterval: 200 * time.Millisecond, Workers: 4})
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	})
	return store
}

// ranRun makes a run of input through the engine, waits for it to stop,
// and loads its evidence.
func ranRun(t *testing.T, store *persist.Store, input string, maxSteps int) eval.Evidence {
	t.Helper()
	r, _, err := store.RunCreate(context.Background(), persist.RunCreateParams{TenantID: "default", Model: "fake",
		Params: agentd.RunParams{MaxSteps: maxSteps}, Input: []agentd.InputMessage{{Role: "user", Content: input}}})
	if err != nil {
		t.Fatal(err)
	}
	persisttest.WaitRun(t, store, r.ID, nil, 20*time.Second)
	ev, err := eval.Load(context.Background(), store, "default", r.ID)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestScoreRealRuns(t *testing.T) {
	t.Parallel()
	store := engine(t)
	answered := ranRun(t, store, "/call calculator {\"expression\": \"6*7\"}\n/call clock\n/say {\"answer\": 42}", 5)
	cut := ranRun(t, store, "/call calculator {\"expression\": \"1\"}\n/next\n/call calculator {\"expression\": \"2\"}\n/say never", 1)

	if len(answered.Calls) != 2 || answered.Calls[0].Tool != "calculator" || answered.Calls[0].Step != 1 || answered.Calls[0].ID == "" {
		t.Fatalf("calls %+v, want the calculator's then the clock's, of step 1", answered.Calls)
	}
	max := func(v float64) *float64 { return &v }
	schema := json.RawMessage(`{"type":"object","properties":{"answer":{"const":42}},"required":["answer"]}`)
	for _, tc := range []struct {
		ev    eval.Evidence
		check agentd.Check
		want  agentd.ScoreOutcome
	}{
		{answered, agentd.Check{Type: agentd.CheckEquals, Value: `{"answer": 42}`}, agentd.ScorePassed},
		{answered, agentd.Check{Type: agentd.CheckJSONSchema, Schema: schema}, agentd.ScorePassed},
		{answered, agentd.Check{Type: agentd.CheckCalled, Tool: "calculator", Arguments: json.RawMessage(`{"expression":"6*7"}`), Count: ptr(1)}, agentd.ScorePassed},
		{answered, agentd.Check{Type: agentd.CheckCalled, Tool: "calculator", Arguments: json.RawMessage(`{"expression":"6*8"}`)}, agentd.ScoreFailed},
		{answered, agentd.Check{Type: agentd.CheckNotCalled, Tool: "clock"}, agentd.ScoreFailed},
		{answered, agentd.Check{Type: agentd.CheckStatus, Status: agentd.StatusCompleted, Reason: agentd.ReasonCompleted}, agentd.ScorePassed},
		{answered, agentd.Check{Type: agentd.CheckMaxSteps, Max: max(2)}, agentd.ScorePassed},
		{answered, agentd.Check{Type: agentd.CheckMaxSteps, Max: max(1)}, agentd.ScoreFailed},
		{answered, agentd.Check{Type: agentd.CheckMaxCost, Max: max(0)}, agentd.ScorePassed}, // the fake has no prices
		{answered, agentd.Check{Type: agentd.CheckMaxLatencyMS, Max: max(60000)}, agentd.ScorePassed},
		{cut, agentd.Check{Type: agentd.CheckStatus, Reason: agentd.ReasonMaxSteps}, agentd.ScorePassed},
		{cut, agentd.Check{Type: agentd.CheckContains, Value: "never"}, agentd.ScoreFailed},
		{cut, agentd.Check{Type: agentd.CheckCalled, Tool: "calculator", Count: ptr(1)}, agentd.ScorePassed},
		{cut, agentd.Check{Type: agentd.CheckRubric, Rubric: "is it right?"}, agentd.ScoreNotScored},
	} {
		s := eval.Score(tc.check, tc.ev)
		if s.Outcome != tc.want || len(s.Evidence) == 0 && tc.want != agentd.ScoreNotScored {
			t.Errorf("%s %+v on run %s: %s %q %+v, want %s with evidence", tc.check.Type, tc.check, tc.ev.Run.ID,
				s.Outcome, s.Reason, s.Evidence, tc.want)
		}
	}
	s := eval.Score(agentd.Check{Type: agentd.CheckCalled, Tool: "calculator"}, answered)
	if e := s.Evidence[0]; e.ToolCallID != answered.Calls[0].ID || e.Status != agentd.CallSucceeded || e.Step != 1 {
		t.Errorf("evidence %+v, want the calculator's call %+v", e, answered.Calls[0])
	}
}

func TestLoadIsPerTenant(t *testing.T) {
	t.Parallel()
	store := engine(t)
	ev := ranRun(t, store, "/say hi", 2)
	if _, err := eval.Load(context.Background(), store, "other", ev.Run.ID); !errors.Is(err, agentd.ErrRunNotFound) {
		t.Fatalf("another tenant's run: %v, want ErrRunNotFound", err)
	}
	if ev.Run.OutputText == nil || *ev.Run.OutputText != "hi" || len(ev.Calls) != 0 || ev.Run.FinishedAt == nil {
		t.Fatalf("evidence %+v", ev)
	}
}
