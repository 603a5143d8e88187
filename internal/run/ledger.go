package run

import (
	"context"
	"sync"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/persist"
)

// budgetTTL is how long a tenant's own monthly budget is kept between
// reads: an admin's change is seen within it, without a read of the
// budget at every model call.
const budgetTTL = 2 * time.Second

// budgets checks a run's budgets before each of its model calls: the
// tenant's monthly one, and the max_cost of the run and of the runs above
// it (a max_cost covers its run's tree of sub-agents), against what the
// ledger says they spent. The call also holds its estimated cost
// (persist.Store.BudgetHold) until the write of its ledger row, so that
// the calls in flight of concurrent runs count: without the holds, every
// run in flight when a budget ran out would make one call more.
type budgets struct {
	store interface {
		BudgetGet(ctx context.Context, tenant string) (*float64, error)
		BudgetHold(ctx context.Context, p persist.BudgetHoldParams) (persist.BudgetHeld, error)
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
// trouble anyway). A call that may be made holds amount under the run's
// epoch (held is then true): its estimated cost and what the run's
// answered calls whose ledger rows are not committed yet cost. A run with
// no monthly budget that applies, and no max_cost of its own or above it
// (a run with a parent may have one above it, until a hold said
// otherwise: uncapped, which check returns for the next call), reads
// nothing.
func (b *budgets) check(ctx context.Context, r agentd.Run, epoch int64, amount float64, uncapped bool) (held, _ bool, err error) {
	if b == nil {
		return false, uncapped, nil
	}
	own, err := b.ownOf(ctx, r.TenantID)
	if err != nil {
		return false, uncapped, err
	}
	monthly := agentd.MonthlyBudget(own, b.monthly)
	if r.Params.Eval != nil {
		monthly = 0 // an evaluation's runs are not held to the tenant's budget (docs/evals.md)
	}
	if monthly <= 0 && r.Params.MaxCost <= 0 && (r.Params.Parent == nil || uncapped) {
		return false, uncapped, nil // no budget: nothing to read
	}
	h, err := b.store.BudgetHold(ctx, persist.BudgetHoldParams{TenantID: r.TenantID, RunID: r.ID, Epoch: epoch,
		Monthly: monthly, Amount: amount})
	if err != nil {
		return false, uncapped, err
	}
	held, err = verdict(r, monthly, h)
	return held, h.Caps == 0, err
}

// verdict is what hold h says of run r's next call against its tenant's
// monthly budget (monthly, 0: none) and the max_cost of its tree.
func verdict(r agentd.Run, monthly float64, h persist.BudgetHeld) (held bool, err error) {
	switch {
	case h.OK:
		return true, nil
	case monthly > 0 && h.Month+h.Held >= monthly:
		return false, &agentd.BudgetError{Budget: agentd.BudgetTenantMonthly, Tenant: r.TenantID, Limit: monthly,
			Spent: h.Month, Held: h.Held}
	case h.Capped != nil:
		e := &agentd.BudgetError{Budget: agentd.BudgetRunMaxCost, Tenant: r.TenantID, Limit: h.Capped.Cap,
			Spent: h.Capped.Spent, Held: h.Capped.Held}
		if h.Capped.RunID != r.ID {
			e.RunID = h.Capped.RunID
		}
		return false, e
	}
	// Refused for no budget: the hold's epoch is past the run's (it was
	// claimed again), and this execution's writes fail as well.
	return false, persist.ErrLeaseLost
}

// defaultAnswerTokens is the answer a call's estimate counts when the run
// sets no max_output_tokens and none of its calls answered longer (capped
// by the model's own output limit when its profile says one).
const defaultAnswerTokens = 1024

// callEstimate is what a call of req is expected to cost at its model's
// prices: prompt tokens of input, and an answer of the run's
// max_output_tokens, else of the longest answer of this execution's calls
// and at least defaultAnswerTokens, within the model's output limit.
func (x *execution) callEstimate(st agentd.RunState, req llm.Request, prompt int) float64 {
	prof := x.d.profiles.For(req.Model)
	if prof.Prices == nil {
		return 0
	}
	out := int64(st.Run.Params.Sampling.MaxOutputTokens)
	if out <= 0 {
		out = max(x.answerTokens, defaultAnswerTokens)
		if prof.MaxOutputTokens > 0 {
			out = min(out, int64(prof.MaxOutputTokens))
		}
	}
	return prof.Prices.Cost(llm.Usage{InputTokens: int64(prompt), OutputTokens: out})
}

// callCost is what calls cost at their models' prices.
func (x *execution) callCost(calls []modelCall) float64 {
	cost := 0.0
	for _, c := range calls {
		cost += x.d.profiles.For(c.model).Prices.Cost(c.usage)
	}
	return cost
}

// holdBudget checks the run's budgets before a model call of req, whose
// prompt is estimated at prompt tokens, holding its estimate and pending
// (what the run's answered calls not yet in the ledger cost) against the
// tenant's monthly budget and the max_cost of its tree.
func (x *execution) holdBudget(ctx context.Context, st agentd.RunState, req llm.Request, prompt int, pending float64) error {
	held, uncapped, err := x.d.budgets.check(ctx, st.Run, x.fence.Epoch, pending+x.callEstimate(st, req, prompt), x.uncapped)
	x.uncapped = uncapped
	if held {
		x.holding = true
	}
	return err
}

// released is ops with, when the run holds part of its budgets, the op
// that deletes the hold: for the write that commits the ledger rows
// of the calls it held for.
func (x *execution) released(ops []persist.Op) []persist.Op {
	if !x.holding {
		return ops
	}
	x.holding = false
	return append(ops, persist.BudgetRelease{RunID: x.fence.RunID, Epoch: x.fence.Epoch})
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
// step's output: the calls count exactly when that output does. The write
// also deletes the run's hold on its tenant's budget, if it has one.
func (x *execution) ledgerRows(st agentd.RunState, step *agentd.Step, calls []modelCall) []persist.Op {
	ops := make([]persist.Op, 0, len(calls))
	for i, c := range calls {
		ops = append(ops, x.ledgerRow(st, step, agentd.ModelCallStep, i+1, c))
	}
	return x.released(ops)
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
