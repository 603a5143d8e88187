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
	// Held is what the calls in flight of the tenant's other runs held of
	// a BudgetTenantMonthly when the call was refused: the month's spend
	// with them reached Limit.
	Held float64
}

func (e *BudgetError) Error() string {
	if e.Budget == BudgetRunMaxCost {
		return fmt.Sprintf("the run's budget (max_cost) of %s is spent: its model calls cost %s; no model call is made past it",
			FormatCost(e.Limit), FormatCost(e.Spent))
	}
	if e.Held > 0 {
		return fmt.Sprintf("tenant %s's monthly budget of %s is spent: its model calls cost %s this month (UTC), "+
			"and its calls in flight are estimated at %s more; no model call is made past it",
			e.Tenant, FormatCost(e.Limit), FormatCost(e.Spent), FormatCost(e.Held))
	}
	return fmt.Sprintf("tenant %s's monthly budget of %s is spent: its model calls cost %s this month (UTC); "+
		"no model call is made past it", e.Tenant, FormatCost(e.Limit), FormatCost(e.Spent))
}

// Detail is the error the run that e stopped records.
func (e *BudgetError) Detail() ErrorDetail {
	return ErrorDetail{Kind: RunErrBudgetExceeded, Message: e.Error()}
}

// FormatCost writes an amount as agentd says one: rounded to 6 decimals,
// with no more than it needs.
func FormatCost(v float64) string { return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64) }

// CheckBudget is the check made before each model call of a run: it
// returns the *BudgetError of the first budget that is spent, the tenant's
// monthly one (monthly > 0, against monthSpent) then the run's (maxCost >
// 0, against runSpent), and nil when the call may be made. A budget is
// spent once what was spent reaches it: the call that crosses it was made
// (its cost is known only after it), the next is not.
func CheckBudget(tenant string, monthly, monthSpent, maxCost, runSpent float64) error {
	if monthly > 0 && monthSpent >= monthly {
		return &BudgetError{Budget: BudgetTenantMonthly, Tenant: tenant, Limit: monthly, Spent: monthSpent}
	}
	if maxCost > 0 && runSpent >= maxCost {
		return &BudgetError{Budget: BudgetRunMaxCost, Tenant: tenant, Limit: maxCost, Spent: runSpent}
	}
	return nil
}
