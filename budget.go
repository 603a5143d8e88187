package agentd

import (
	"fmt"
	"math"
	"strconv"
)

// Budget names a budget that caps what model calls may cost, in the
// currency of the models file's prices (docs/usage.md).
type Budget string

// The budgets a model call is checked against before it is made.
const (
	// BudgetTenantMonthly: what a tenant's model calls may cost in a
	// calendar month (UTC): its own, set by an admin, else the server's
	// default (AGENTD_TENANT_MONTHLY_BUDGET).
	BudgetTenantMonthly Budget = "tenant_monthly"
	// BudgetRunMaxCost: what one run's model calls may cost (RunParams.MaxCost).
	BudgetRunMaxCost Budget = "run_max_cost"
)

// MonthlyBudget is the monthly budget that applies to a tenant: its own
// (own, when an admin set one), else the server's default def; 0 is none.
func MonthlyBudget(own *float64, def float64) float64 {
	if own != nil {
		return max(*own, 0)
	}
	return max(def, 0)
}

// BudgetError says that a model call was not made because a budget was
// spent: Spent had reached Limit. The run ends failed with
// ReasonBudgetExceeded and Detail as its error.
type BudgetError struct {
	Budget Budget
	Tenant string // the tenant of a BudgetTenantMonthly
	Limit  float64
	Spent  float64
	// Held is what the calls in flight of the other runs held when the
	// call was refused (the tenant's, or those of the max_cost's tree):
	// Spent with them reached Limit.
	Held float64
	// RunID is the run above this one (its parent, or further up) whose
	// max_cost, which covers its sub-agents' runs, was spent; "": the
	// run's own.
	RunID string
}

func (e *BudgetError) Error() string {
	inFlight := ""
	if e.Held > 0 {
		inFlight = fmt.Sprintf(", and its calls in flight are estimated at %s more", FormatCost(e.Held))
	}
	if e.Budget == BudgetRunMaxCost {
		whose := "the run's budget (max_cost)"
		if e.RunID != "" {
			whose = fmt.Sprintf("the budget (max_cost) of run %s, which covers its sub-agents' runs and so this one,", e.RunID)
		}
		return fmt.Sprintf("%s of %s is spent: its model calls cost %s%s; no model call is made past it",
			whose, FormatCost(e.Limit), FormatCost(e.Spent), inFlight)
	}
	return fmt.Sprintf("tenant %s's monthly budget of %s is spent: its model calls cost %s this month (UTC)%s; "+
		"no model call is made past it", e.Tenant, FormatCost(e.Limit), FormatCost(e.Spent), inFlight)
}

// Detail is the error the run that e stopped records.
func (e *BudgetError) Detail() ErrorDetail {
	return ErrorDetail{Kind: RunErrBudgetExceeded, Message: e.Error()}
}

// FormatCost writes an amount as agentd says one: rounded to 6 decimals,
// with no more than it needs.
func FormatCost(v float64) string { return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64) }
