package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentd/agentd"
)

// UsageRow is one group of GET /usage: the values of its keys (Key), and
// what its model calls used and cost.
type UsageRow = agentd.UsageRow

// RunUsage is a run's usage as its view shows it (Run.Usage): its tokens,
// and those written to the providers' prompt caches.
type RunUsage = agentd.RunUsage

// Budget is a tenant's monthly budget as an admin sees it: its own, the
// server's default, the one that applies, and this month's spend.
type Budget = agentd.BudgetView

// UsageQuery is what Usage asks for: the model calls made from From up to
// To (each zero: the current month, UTC), summed by the keys of GroupBy
// (agentd.UsageKeys; none: one row for all).
type UsageQuery struct {
	From, To time.Time
	GroupBy  []agentd.UsageKey
	// Tenant, for a credential with the admin scope, asks for another
	// tenant's usage, or "*" for every tenant's; "": the caller's own.
	Tenant string
}

// AllTenants is UsageQuery.Tenant for every tenant's usage (admin).
const AllTenants = "*"

// Usage reads what the tenant's model calls used and cost, by the cost
// ledger (GET /usage).
func (c *Client) Usage(ctx context.Context, q UsageQuery) ([]UsageRow, error) {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339Nano))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339Nano))
	}
	if len(q.GroupBy) > 0 {
		keys := make([]string, len(q.GroupBy))
		for i, k := range q.GroupBy {
			keys[i] = string(k)
		}
		v.Set("group_by", strings.Join(keys, ","))
	}
	set(v, "tenant", q.Tenant)
	var out struct {
		Data []UsageRow `json:"data"`
	}
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/usage", query: v}, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// GetBudget reads a tenant's monthly budget (a credential with the admin
// scope).
func (c *Client) GetBudget(ctx context.Context, tenant string) (*Budget, error) {
	var out Budget
	if _, err := c.do(ctx, request{method: http.MethodGet, path: budgetPath(tenant)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetBudget sets a tenant's own monthly budget, in the currency of the
// models file's prices (0: none, whatever the server's default), or with
// nil removes it so that the server's default applies (a credential with
// the admin scope). The tenant's runs are checked against it from their
// next model call on.
func (c *Client) SetBudget(ctx context.Context, tenant string, monthly *float64) (*Budget, error) {
	body := struct {
		Monthly *float64 `json:"monthly"`
	}{monthly}
	var out Budget
	if _, err := c.do(ctx, request{method: http.MethodPut, path: budgetPath(tenant), body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func budgetPath(tenant string) string { return "/admin/tenants/" + esc(tenant) + "/budget" }
