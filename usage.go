package agentd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// ModelCallKind is what a model call of the ledger was made for.
type ModelCallKind string

// Model call kinds.
const (
	// ModelCallStep: a step's call (each continuation of a cut answer is a
	// call of its own).
	ModelCallStep ModelCallKind = "step"
	// ModelCallCompaction: the call that wrote a compaction's summary.
	ModelCallCompaction ModelCallKind = "compaction"
	// ModelCallExtraction: the call that extracted memory from a run that
	// completed (its step is 0, its n the attempt's number).
	ModelCallExtraction ModelCallKind = "extraction"
)

// ModelCallKinds lists every model call kind.
func ModelCallKinds() []ModelCallKind {
	return []ModelCallKind{ModelCallStep, ModelCallCompaction, ModelCallExtraction}
}

// UsageKey is a key GET /usage groups the ledger's rows by (group_by).
type UsageKey string

// Usage keys.
const (
	UsageByTenant   UsageKey = "tenant"
	UsageByModel    UsageKey = "model"    // the model the run asked for
	UsageByAgent    UsageKey = "agent"    // the agent the run started from (null: none)
	UsageByDay      UsageKey = "day"      // the call's day, UTC, as 2006-01-02
	UsageByProvider UsageKey = "provider" // the provider that answered
	UsageByRun      UsageKey = "run"      // the run's id
)

// UsageKeys lists every usage key, in the order a row shows them.
func UsageKeys() []UsageKey {
	return []UsageKey{UsageByTenant, UsageByModel, UsageByAgent, UsageByDay, UsageByProvider, UsageByRun}
}

// UsageQuery asks the ledger for the usage of the model calls made from
// From up to To (excluded), summed by the keys of GroupBy (none: one row
// for all).
type UsageQuery struct {
	Tenant   string // "": every tenant's (an admin's report)
	From, To time.Time
	GroupBy  []UsageKey
	// Limit caps the rows answered; 0: no cap.
	Limit int
}

// UsageRow is one group of GET /usage: the value of each of its keys and
// what its model calls used and cost. InputTokens counts every input
// token, CachedInputTokens and CacheWriteTokens among them; OutputTokens
// counts ReasoningTokens.
type UsageRow struct {
	// Group holds the value of each group_by key; nil is a value the
	// calls did not have (the agent of a run that started from none).
	Group             map[UsageKey]*string
	InputTokens       int64
	CachedInputTokens int64
	CacheWriteTokens  int64
	OutputTokens      int64
	ReasoningTokens   int64
	Cost              float64 // in the currency of the models file's prices
	Calls             int64
}

// usageTotals are a UsageRow's keys after its group's.
type usageTotals struct {
	InputTokens       int64   `json:"input_tokens"`
	CachedInputTokens int64   `json:"cached_input_tokens"`
	CacheWriteTokens  int64   `json:"cache_write_tokens"`
	OutputTokens      int64   `json:"output_tokens"`
	ReasoningTokens   int64   `json:"reasoning_tokens"`
	Cost              float64 `json:"cost"`
	Calls             int64   `json:"calls"`
}

// MarshalJSON writes the row as GET /usage shows it: its group's keys (in
// UsageKeys' order), then its totals.
func (r UsageRow) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for _, k := range UsageKeys() {
		v, ok := r.Group[k]
		if !ok {
			continue
		}
		val, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%q:%s,", k, val)
	}
	totals, err := json.Marshal(usageTotals{r.InputTokens, r.CachedInputTokens, r.CacheWriteTokens, r.OutputTokens,
		r.ReasoningTokens, r.Cost, r.Calls})
	if err != nil {
		return nil, err
	}
	b.Write(totals[1:])
	return b.Bytes(), nil
}

// UnmarshalJSON reads a row as MarshalJSON writes it; keys that are
// neither usage keys nor totals are ignored.
func (r *UsageRow) UnmarshalJSON(data []byte) error {
	var t usageTotals
	if err := json.Unmarshal(data, &t); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	*r = UsageRow{InputTokens: t.InputTokens, CachedInputTokens: t.CachedInputTokens, CacheWriteTokens: t.CacheWriteTokens,
		OutputTokens: t.OutputTokens, ReasoningTokens: t.ReasoningTokens, Cost: t.Cost, Calls: t.Calls}
	for name, raw := range all {
		if !slices.Contains(UsageKeys(), UsageKey(name)) {
			continue
		}
		var v *string
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("usage key %s: %w", name, err)
		}
		if r.Group == nil {
			r.Group = map[UsageKey]*string{}
		}
		r.Group[UsageKey(name)] = v
	}
	return nil
}

// Key is the value of key k in the row's group ("" when the row is not
// grouped by k, or its calls had none).
func (r UsageRow) Key(k UsageKey) string {
	if v := r.Group[k]; v != nil {
		return *v
	}
	return ""
}

// RunCost is what a run's model calls cost by the ledger, with those of
// the sub-agents' runs under it (as a run's usage counts theirs).
type RunCost struct {
	Cost             float64
	CacheWriteTokens int64
}

// RunUsage is a run's usage as its view shows it: the tokens of its steps
// (and of its sub-agents' runs once each ended), and, from the ledger,
// those written to the providers' prompt caches.
type RunUsage struct {
	Usage
	CacheWriteTokens int64 `json:"cache_write_tokens"`
}

// BudgetView is a tenant's monthly budget as GET and PUT
// /admin/tenants/{tenant}/budget show it.
type BudgetView struct {
	TenantID string `json:"tenant_id"`
	// Monthly is the tenant's own budget, set by an admin (0: none); nil:
	// the server's default applies.
	Monthly *float64 `json:"monthly"`
	// Default is the server's (AGENTD_TENANT_MONTHLY_BUDGET); nil: none.
	Default *float64 `json:"default"`
	// Effective is the budget that applies (MonthlyBudget); nil: none.
	Effective *float64 `json:"effective"`
	// Spent is what the tenant's model calls cost this month (UTC).
	Spent float64 `json:"spent"`
}
