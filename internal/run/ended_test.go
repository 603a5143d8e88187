package run_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd"
)

// TestEndWhileWaitingClosesWhatIsOpen: a run cancelled, or swept past its
// deadline, while it waits for a decision leaves no step acting and no call
// planned, waiting or running: each call that did not run is rejected with
// the reason, and a side effect whose outcome is unknown stays unknown and
// is named by the run's end as unresolved.
func TestEndWhileWaitingClosesWhatIsOpen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.engine(t, 5*time.Second)
	ctx := context.Background()
	// An approval gates the second call; the first, a calculator, runs.
	approval := b.create(t, "/call calculator {\"expression\":\"1+1\"}\n/call guarded {}\n/say never", agentd.RunParams{})
	// A side effect times out: its outcome is unknown.
	unknown := b.create(t, "/call slow_effect {}\n/say never", agentd.RunParams{})
	for _, id := range []string{approval.ID, unknown.ID} {
		if r := b.wait(t, id, nil); r.Status != agentd.StatusRequiresAction {
			t.Fatalf("run is %s, want requires_action", r.Status)
		}
	}
	for _, id := range []string{approval.ID, unknown.ID} {
		if _, err := b.store.RunCancel(ctx, "default", id, "local"); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{approval.ID, unknown.ID} {
		steps, _ := b.store.StepsList(ctx, id)
		for _, st := range steps {
			if st.Status == agentd.StepRunning || st.Status == agentd.StepActing || st.FinishedAt == nil {
				t.Errorf("run %s: step %d is %s after the cancel", id, st.Seq, st.Status)
			}
			for _, c := range st.Calls {
				if c.Status.Pending() || c.Status == agentd.CallAwaitingApproval {
					t.Errorf("run %s: call %s is %s after the cancel", id, c.Name, c.Status)
				}
			}
		}
	}
	steps, _ := b.store.StepsList(ctx, approval.ID)
	if calc, guarded := steps[0].Calls[0], steps[0].Calls[1]; calc.Status != agentd.CallSucceeded || guarded.Status != agentd.CallRejected {
		t.Fatalf("approval run: calculator %s, guarded %s; want succeeded and rejected", calc.Status, guarded.Status)
	}
	steps, _ = b.store.StepsList(ctx, unknown.ID)
	effect := steps[0].Calls[0]
	if effect.Status != agentd.CallUnknown {
		t.Fatalf("the side effect is %s, want unknown", effect.Status)
	}
	evs := b.events(t, unknown.ID)
	var end agentd.RunEndedData
	if last := evs[len(evs)-1]; last.Type != agentd.EventRunCancelled || json.Unmarshal(envelopeData(t, last.Data), &end) != nil ||
		!slices.Equal(end.UnresolvedToolCalls, []string{effect.ID}) {
		t.Fatalf("the run's end %s does not name the unresolved call %s", last.Data, effect.ID)
	}
}

// envelopeData returns the data of an event's envelope.
func envelopeData(t *testing.T, envelope []byte) json.RawMessage {
	t.Helper()
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(envelope, &env); err != nil {
		t.Fatal(err)
	}
	return env.Data
}
