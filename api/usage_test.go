package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
)

type usageBody struct {
	Data []agentd.UsageRow `json:"data"`
}

// TestUsageReport: GET /usage reports the tenant's own calls of the
// range (the current month by default), grouped as asked; an admin may
// name another tenant, or every one; a tenant without the admin scope may
// not; a bad parameter is 422 naming it.
func TestUsageReport(t *testing.T) {
	t.Parallel()
	f := newTenantFixture(t)
	insertModelCall(t, f.url, tenantA, f.run, "big", 1.25, `date_trunc('month', now(), 'UTC') + interval '1 second'`)
	insertModelCall(t, f.url, tenantA, f.run, "big", 100, `date_trunc('month', now(), 'UTC') - interval '1 second'`)
	insertModelCall(t, f.url, tenantB, agentd.NewID(), "b-model", 3, `now()`)
	report := func(cred, query string, headers ...string) []agentd.UsageRow {
		t.Helper()
		return want[usageBody](t, f.do(cred, "GET", "/usage"+query, "", headers...), http.StatusOK).Data
	}
	if rows := report("a", ""); len(rows) != 1 || rows[0].Calls != 2 || rows[0].Cost != 1.75 || rows[0].CacheWriteTokens != 20 ||
		rows[0].InputTokens != 200 || len(rows[0].Group) != 0 {
		t.Fatalf("A's month: %+v", rows)
	}
	rows := report("a", "?group_by=model,run&from=2000-01-01&to=2999-12-31")
	if len(rows) != 2 || rows[0].Key(agentd.UsageByModel) != "a-secret-model" || rows[1].Key(agentd.UsageByModel) != "big" ||
		rows[1].Cost != 101.25 || rows[1].Key(agentd.UsageByRun) != f.run {
		t.Fatalf("A by model and run, ever: %+v", rows)
	}
	if rows := report("b", "?group_by=tenant"); len(rows) != 1 || rows[0].Key(agentd.UsageByTenant) != tenantB || rows[0].Cost != 3 {
		t.Fatalf("B's own: %+v", rows)
	}
	if rows := report("admin", "?group_by=tenant&tenant=*"); len(rows) != 2 || rows[0].Key(agentd.UsageByTenant) != tenantA ||
		rows[1].Key(agentd.UsageByTenant) != tenantB {
		t.Fatalf("every tenant: %+v", rows)
	}
	if rows := report("admin", "?tenant="+tenantB); len(rows) != 1 || rows[0].Cost != 3 {
		t.Fatalf("the admin's report of B: %+v", rows)
	}
	if rows := report("admin", "", "X-Tenant-ID", tenantA); len(rows) != 1 || rows[0].Cost != 1.75 {
		t.Fatalf("the admin acting for A: %+v", rows)
	}
	if r := f.do("a", "GET", "/usage?from=2999-01-01T00:00:00%2B02:00&to=2999-02-01", ""); r.status != http.StatusOK ||
		strings.TrimSpace(string(r.body)) != `{"data":[]}` {
		t.Fatalf("a range without calls: %d %s", r.status, r.body)
	}
	wantProblem(t, f.do("a", "GET", "/usage?tenant="+tenantB, ""), http.StatusForbidden, api.CodeTenantNotAllowed)
	wantProblem(t, f.do("a", "GET", "/usage?tenant=*", ""), http.StatusForbidden, api.CodeTenantNotAllowed)
	for query, field := range map[string]string{
		"?group_by=colour":                          "group_by",
		"?group_by=day,day":                         "group_by",
		"?group_by=day,":                            "group_by",
		"?from=yesterday":                           "from",
		"?to=2025-13-01":                            "to",
		"?from=2025-02-01&to=2025-01-31":            "to",
		"?from=2025-01-01T00:00:00Z&to=2025-01-01Z": "to",
	} {
		if p := wantProblem(t, f.do("a", "GET", "/usage"+query, ""), http.StatusUnprocessableEntity, api.CodeInvalidField); p.Field != field {
			t.Errorf("%s: field %q, want %q", query, p.Field, field)
		}
	}
	if p := wantProblem(t, f.do("admin", "GET", "/usage?tenant=no%20such", ""), http.StatusUnprocessableEntity,
		api.CodeInvalidField); p.Field != "tenant" {
		t.Errorf("a bad tenant: field %q", p.Field)
	}
	wantProblem(t, f.do("a", "GET", "/usage?group=day", ""), http.StatusBadRequest, api.CodeUnknownParameter)
}

// TestBudgetRoutes: an admin reads and sets a tenant's monthly budget,
// which falls back to the server's default when removed; a bad one is 422.
func TestBudgetRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *api.Config) { c.MonthlyBudget = 40 })
	get := func() agentd.BudgetView {
		t.Helper()
		return want[agentd.BudgetView](t, b.do("GET", "/admin/tenants/acme/budget", ""), http.StatusOK)
	}
	v := get()
	if v.TenantID != "acme" || v.Monthly != nil || v.Default == nil || *v.Default != 40 || v.Effective == nil || *v.Effective != 40 ||
		v.Spent != 0 {
		t.Fatalf("before any: %+v", v)
	}
	v = want[agentd.BudgetView](t, b.do("PUT", "/admin/tenants/acme/budget", `{"monthly": 12.5}`), http.StatusOK)
	if v.Monthly == nil || *v.Monthly != 12.5 || v.Effective == nil || *v.Effective != 12.5 {
		t.Fatalf("set: %+v", v)
	}
	if v := get(); v.Monthly == nil || *v.Monthly != 12.5 {
		t.Fatalf("read back: %+v", v)
	}
	if v := want[agentd.BudgetView](t, b.do("PUT", "/admin/tenants/acme/budget", `{"monthly": 0}`), http.StatusOK); v.Effective != nil {
		t.Fatalf("a budget of 0 is none: %+v", v)
	}
	if v := want[agentd.BudgetView](t, b.do("PUT", "/admin/tenants/acme/budget", `{"monthly": null}`), http.StatusOK); v.Monthly != nil ||
		v.Effective == nil || *v.Effective != 40 {
		t.Fatalf("removed: %+v", v)
	}
	if v := want[agentd.BudgetView](t, b.do("GET", "/admin/tenants/other/budget", ""), http.StatusOK); v.Monthly != nil {
		t.Fatalf("another tenant: %+v", v)
	}
	for body, code := range map[string]string{`{}`: api.CodeInvalidField, `{"monthly": -1}`: api.CodeInvalidField,
		`{"monthly": "5"}`: api.CodeInvalidField, `{"monthly": 1e13}`: api.CodeInvalidField, `{"monthly": 1e400}`: api.CodeInvalidField,
		`{"monthly": 5, "daily": 1}`: api.CodeInvalidField, `[1]`: api.CodeInvalidJSON} {
		status := http.StatusUnprocessableEntity
		if code == api.CodeInvalidJSON {
			status = http.StatusBadRequest
		}
		wantProblem(t, b.do("PUT", "/admin/tenants/acme/budget", body), status, code)
	}
	if p := wantProblem(t, b.do("GET", "/admin/tenants/"+strings.Repeat("x", 65)+"/budget", ""), http.StatusUnprocessableEntity,
		api.CodeInvalidField); p.Field != "tenant" {
		t.Fatalf("a bad tenant: %+v", p)
	}
	wantProblem(t, b.do("PUT", "/admin/tenants/acme/budget", `{"monthly": 1}`, "Content-Type", "text/plain"),
		http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType)
}

// TestRunViewCost: a run's view shows its cost and its cache writes by
// the ledger, with its sub-agents' runs', on GET /runs/{id}, GET /runs and
// a cancel's answer.
func TestRunViewCost(t *testing.T) {
	t.Parallel()
	f := newTenantFixture(t)
	insertModelCall(t, f.url, tenantA, f.run, "m", 0.25, "now()")
	insertModelCall(t, f.url, tenantA, f.run, "m", 0.5, "now()")
	child := want[agentd.RunView](t, f.do("a", "POST", "/runs", `{"input": "child"}`), http.StatusAccepted)
	insertModelCall(t, f.url, tenantA, child.ID, "m", 1, "now()")
	setParent(t, f.url, child.ID, f.run)
	r := want[agentd.RunView](t, f.do("a", "GET", "/runs/"+f.run, ""), http.StatusOK)
	if r.Cost != 1.75 || r.Usage.CacheWriteTokens != 30 {
		t.Fatalf("the run's cost %v, cache writes %d", r.Cost, r.Usage.CacheWriteTokens)
	}
	page := want[agentd.Page[agentd.RunView]](t, f.do("a", "GET", "/runs", ""), http.StatusOK)
	costs := map[string]float64{}
	for _, r := range page.Data {
		costs[r.ID] = r.Cost
	}
	if costs[f.run] != 1.75 || costs[child.ID] != 1 || costs[f.ended] != 0.5 {
		t.Fatalf("the page's costs: %v", costs)
	}
	if r := want[agentd.RunView](t, f.do("a", "POST", "/runs/"+child.ID+"/cancel", ""), http.StatusOK); r.Cost != 1 ||
		r.Usage.CacheWriteTokens != 10 {
		t.Fatalf("the cancel's answer: cost %v, cache writes %d", r.Cost, r.Usage.CacheWriteTokens)
	}
}

// setParent makes run child a sub-agent's run of parent (SQL).
func setParent(t *testing.T, url, child, parent string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE runs SET parent_run_id = $2 WHERE id = $1`, child, parent); err != nil {
		t.Fatal(err)
	}
}
