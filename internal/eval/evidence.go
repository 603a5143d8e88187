package eval

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/agentd/agentd"
)

// Store reads what was stored of a run.
type Store interface {
	// RunGet returns a tenant's run; agentd.ErrRunNotFound when it has
	// none of that id.
	RunGet(ctx context.Context, tenantID, id string) (agentd.Run, error)
	// RunCosts returns the costs of the runs by the ledger, by run id (a
	// run without model calls has none).
	RunCosts(ctx context.Context, ids []string) (map[string]agentd.RunCost, error)
	// StepsList returns a run's steps in order, with their tool calls.
	StepsList(ctx context.Context, runID string) ([]agentd.StepDetail, error)
}

// Evidence is what was stored of a run that its checks are scored by:
// its view as GET /runs/{id} shows it (cost included) and the tool calls
// of its steps, in the order they were made.
type Evidence struct {
	Run   agentd.RunView
	Calls []Call
}

// Call is a tool call a run's model made, whatever became of it.
type Call struct {
	ID        string // the tool call's id, as GET /runs/{id}/steps shows it
	Step      int    // the seq of the step that made it
	Tool      string
	Arguments json.RawMessage // as stored
	Status    agentd.CallStatus
}

// Load reads the evidence of a tenant's run from store;
// agentd.ErrRunNotFound when the tenant has no such run.
func Load(ctx context.Context, store Store, tenantID, runID string) (Evidence, error) {
	run, err := store.RunGet(ctx, tenantID, runID)
	if err != nil {
		return Evidence{}, fmt.Errorf("load run: %w", err)
	}
	costs, err := store.RunCosts(ctx, []string{run.ID})
	if err != nil {
		return Evidence{}, fmt.Errorf("load run cost: %w", err)
	}
	steps, err := store.StepsList(ctx, run.ID)
	if err != nil {
		return Evidence{}, fmt.Errorf("load steps: %w", err)
	}
	v := run.View()
	v.Cost, v.Usage.CacheWriteTokens = costs[run.ID].Cost, costs[run.ID].CacheWriteTokens
	ev := Evidence{Run: v}
	for _, st := range steps {
		for _, c := range st.Calls {
			ev.Calls = append(ev.Calls, Call{ID: c.ID, Step: st.Seq, Tool: c.Name, Arguments: c.Arguments, Status: c.Status})
		}
	}
	return ev, nil
}
