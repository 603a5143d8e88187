package run

import (
	"context"
	"sync"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// budgetTTL is how long a tenant's own monthly budget is kept between
// reads: an admin's change is seen within it, without a read of the
// budget at every model call.
const budgetTTL = 2 * time.Second

// budgets checks a run's budgets before each of its model calls: the
// tenant's monthly one and the run's max_cost, against what the ledger
// says they spent (persist.Store.Spend).
type budgets struct {
	store interface {
		Spend(ctx context.Context, tenant, runID string) (month, run float64, err error)
		BudgetGet(ctx context.Context, tenant string) (*float64, error)
	}
	monthly float64 // the default of a tenant without its own

	mu  sync.Mutex
	own map[string]ownBudget
}

// ownBudget is a tenant's own monthly budget as read at at; nil: none.
type ownBudget struct {
	monthly *float64
	at      time.Time
}

func newBudgets(store Store, monthly float64) *budgets {
	if store == nil {
		return nil
	}
	return &budgets{store: store, monthly: monthly, own: map[string]ownBudget{}}
}

// check returns the *agentd.BudgetError of a spent budget of run r, nil
// when its next model call may be made, or the error of a failed read (the
// call is not made: the write that follows it would meet the database's
// trouble anyway).
func (b *budgets) check(ctx context.Context, r agentd.Run) error {
	if b == nil {
		return nil
	}
	own, err := b.ownOf(ctx, r.TenantID)
	if err != nil {
		return err
	}
	monthly := agentd.MonthlyBudget(own, b.monthly)
	if monthly <= 0 && r.Params.MaxCost <= 0 {
		return nil // no budget: nothing to read
	}
	month, spent, err := b.store.Spend(ctx, r.TenantID, r.ID)
	if err != nil {
		return err
	}
	return agentd.CheckBudget(r.TenantID, monthly, month, r.Params.MaxCost, spent)
}

func (b *budgets) ownOf(ctx context.Context, tenant string) (*float64, error) {
	b.mu.Lock()
	o, ok := b.own[tenant]
	b.mu.Unlock()
	if ok && time.Since(o.at) < budgetTTL {
		return o.monthly, nil
	}
	monthly, err := b.store.BudgetGet(ctx, tenant)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if len(b.own) > 10000 {
		clear(b.own) // tenants come and go: the cache is not their list
	}
	b.own[tenant] = ownBudget{monthly: monthly, at: time.Now()}
	b.mu.Unlock()
	return monthly, nil
}

// ledgerRows are the ledger's rows of the model calls that answered in a
// step (calls, in order), of kind step, for the write that commits the
// step's output: the calls count exactly when that output does.
func (x *execution) ledgerRows(st agentd.RunState, step *agentd.Step, calls []modelCall) []persist.Op {
	ops := make([]persist.Op, 0, len(calls))
	for i, c := range calls {
		ops = append(ops, x.ledgerRow(st, step, agentd.ModelCallStep, i+1, c))
	}
	return ops
}

// ledgerRow is the ledger's row of call c, the n-th of its kind in step.
func (x *execution) ledgerRow(st agentd.RunState, step *agentd.Step, kind agentd.ModelCallKind, n int, c modelCall) persist.LedgerInsert {
	prof := x.d.profiles.For(c.model)
	row := persist.LedgerInsert{TenantID: st.Run.TenantID, RunID: st.Run.ID, StepID: step.ID, StepSeq: step.Seq, N: n,
		Kind: kind, Model: c.model, Provider: prof.Provider(), UpstreamModel: prof.Route.Model,
		InputTokens: c.usage.InputTokens, CachedInputTokens: c.usage.CachedInputTokens, CacheWriteTokens: c.usage.CacheWriteTokens,
		OutputTokens: c.usage.OutputTokens, ReasoningTokens: c.usage.ReasoningTokens, Cost: prof.Prices.Cost(c.usage),
		FallbackFrom: c.fallbackFrom, FallbackReason: c.fallbackReason}
	if prof.Prices != nil {
		row.PriceVersion = x.d.priceVersion
	}
	if a := st.Run.Params.Agent; a != nil {
		row.Agent = a.Name
	}
	return row
}

// counting counts the ledger's rows of a write that err says committed.
func (x *execution) counting(rows []persist.Op, err error) error {
	if err == nil {
		x.counted(rows)
	}
	return err
}

// counted adds the ledger's committed rows to the series of tokens and
// cost by model.
func (x *execution) counted(rows []persist.Op) {
	for _, op := range rows {
		r, ok := op.(persist.LedgerInsert)
		if !ok {
			continue
		}
		m := x.metricModel(r.Model)
		for kind, n := range map[string]int64{"input": r.InputTokens, "cached_input": r.CachedInputTokens,
			"cache_write": r.CacheWriteTokens, "output": r.OutputTokens, "reasoning": r.ReasoningTokens} {
			x.d.m.ModelTokens.WithLabelValues(m, kind).Add(float64(n))
		}
		x.d.m.ModelCost.WithLabelValues(m).Add(r.Cost)
	}
}
