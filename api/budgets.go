package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
)

// maxBudget bounds a monthly budget, so that every one is a number the
// ledger's sums compare with exactly.
const maxBudget = 1e12

// budgetTenant reads the {tenant} of an admin's budget route.
func budgetTenant(r *http.Request) (string, error) {
	t := chi.URLParam(r, "tenant")
	if !auth.ValidTenant(t) {
		return "", fieldError("tenant", "must be %s", auth.TenantRule)
	}
	return t, nil
}

// budgetGet answers GET /admin/tenants/{tenant}/budget: the tenant's own
// monthly budget, the server's default, the one that applies, and what the
// tenant spent this month.
func (s *server) budgetGet(w http.ResponseWriter, r *http.Request) error {
	tenant, err := budgetTenant(r)
	if err != nil {
		return err
	}
	v, err := s.budgetView(r.Context(), tenant)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, v)
	return nil
}

// budgetRequest is the body of PUT /admin/tenants/{tenant}/budget.
type budgetRequest struct {
	// Monthly is the tenant's own budget (0: none, whatever the default),
	// or null to remove it, so that the server's default applies; the key
	// is required.
	Monthly json.RawMessage `json:"monthly"`
}

// budgetPut answers PUT /admin/tenants/{tenant}/budget: it sets (or with
// null removes) the tenant's own monthly budget, which the next model
// call of each of the tenant's runs, on every instance, is checked
// against; the answer is the budget as GET shows it.
func (s *server) budgetPut(w http.ResponseWriter, r *http.Request) error {
	tenant, err := budgetTenant(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req budgetRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	var monthly *float64
	switch {
	case req.Monthly == nil:
		return fieldError("monthly", "is required: a number of at least 0 (0: no budget), or null for the server's default")
	case !isNull(req.Monthly):
		var v float64
		if err := json.Unmarshal(req.Monthly, &v); err != nil || v < 0 || v > maxBudget {
			return fieldError("monthly", "must be a number from 0 (no budget) to %g, or null for the server's default", float64(maxBudget))
		}
		monthly = &v
	}
	ctx := r.Context()
	if err := s.store.BudgetSet(ctx, tenant, monthly, ActorFromContext(ctx)); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "audit: tenant budget set", slog.Bool("audit", true), slog.String("actor", ActorFromContext(ctx)),
		slog.String("tenant_id", tenant), slog.String("monthly", string(req.Monthly)), slog.String("request_id", requestIDFrom(ctx)))
	v, err := s.budgetView(ctx, tenant)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, v)
	return nil
}

// budgetView is tenant's budget as the admin's routes show it.
func (s *server) budgetView(ctx context.Context, tenant string) (agentd.BudgetView, error) {
	own, err := s.store.BudgetGet(ctx, tenant)
	if err != nil {
		return agentd.BudgetView{}, err
	}
	spent, _, err := s.store.Spend(ctx, tenant, "")
	if err != nil {
		return agentd.BudgetView{}, err
	}
	v := agentd.BudgetView{TenantID: tenant, Monthly: own, Spent: spent}
	if s.monthlyBudget > 0 {
		def := s.monthlyBudget
		v.Default = &def
	}
	if b := agentd.MonthlyBudget(own, s.monthlyBudget); b > 0 {
		v.Effective = &b
	}
	return v, nil
}
