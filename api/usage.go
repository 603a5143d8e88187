package api

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
)

// maxUsageRows is the most groups GET /usage answers: a report of more
// (by run over a long range) is refused, naming group_by, rather than
// paged.
const maxUsageRows = 10000

// allTenants, as GET /usage's tenant, asks an admin's report of every
// tenant.
const allTenants = "*"

// usageGet answers GET /usage: the ledger's model calls of the caller's
// tenant (an admin may name another, or every one), from from up to to
// (the current month by default), summed by the keys of group_by.
func (s *server) usageGet(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	tenant, err := usageTenant(r.Context(), q.Get("tenant"))
	if err != nil {
		return err
	}
	from, to, err := usageRange(q, time.Now())
	if err != nil {
		return err
	}
	by, err := groupBy(q.Get("group_by"))
	if err != nil {
		return err
	}
	rows, err := s.store.Usage(r.Context(), agentd.UsageQuery{Tenant: tenant, From: from, To: to, GroupBy: by,
		Limit: maxUsageRows + 1})
	if err != nil {
		return err
	}
	if len(rows) > maxUsageRows {
		return fieldError("group_by", "the report has more than %d groups: group by fewer keys, or narrow from and to",
			maxUsageRows)
	}
	if rows == nil {
		rows = []agentd.UsageRow{}
	}
	s.writeJSON(w, r, http.StatusOK, listJSON[agentd.UsageRow]{Data: rows})
	return nil
}

// usageTenant is the tenant GET /usage reports on: the request's, unless
// tenant names another (an admin's credential only) or is allTenants
// ("" then).
func usageTenant(ctx context.Context, tenant string) (string, error) {
	own := TenantFromContext(ctx)
	if tenant == "" || tenant == own {
		return own, nil
	}
	if c, _ := ctx.Value(keyCaller).(*caller); c == nil || !c.Has(auth.Admin) {
		return "", newError(http.StatusForbidden, CodeTenantNotAllowed, "Tenant not allowed",
			"tenant names another tenant than the request's; only a credential with the admin scope may report on another tenant")
	}
	if tenant == allTenants {
		return "", nil
	}
	if !auth.ValidTenant(tenant) {
		return "", fieldError("tenant", "must be %s, or * for every tenant", auth.TenantRule)
	}
	return tenant, nil
}

// usageRange reads from and to: each an RFC 3339 time or a date (UTC); to
// is excluded, and a date as to counts its whole day. Without them, the
// calendar month (UTC) of now.
func usageRange(q url.Values, now time.Time) (from, to time.Time, err error) {
	now = now.UTC()
	from = time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	to = from.AddDate(0, 1, 0)
	if v := q.Get("from"); v != "" {
		if from, err = usageTime("from", v, false); err != nil {
			return from, to, err
		}
	}
	if v := q.Get("to"); v != "" {
		if to, err = usageTime("to", v, true); err != nil {
			return from, to, err
		}
	}
	if !from.Before(to) {
		return from, to, fieldError("to", "must be after from (%s)", from.Format(time.RFC3339Nano))
	}
	return from, to, nil
}

// usageTime parses parameter name's value v; a date is its day's start,
// or with end the next day's.
func usageTime(name, v string, end bool) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UTC(), nil
	}
	d, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, fieldError(name, "must be an RFC 3339 time (2006-01-02T15:04:05Z) or a date (2006-01-02), not %q",
			clip(v, 64))
	}
	if end {
		d = d.AddDate(0, 0, 1)
	}
	return d, nil
}

// groupBy reads group_by: comma-separated keys among agentd.UsageKeys,
// each at most once; empty: none.
func groupBy(v string) ([]agentd.UsageKey, error) {
	if v == "" {
		return nil, nil
	}
	var by []agentd.UsageKey
	for _, k := range strings.Split(v, ",") {
		key := agentd.UsageKey(strings.TrimSpace(k))
		switch {
		case !slices.Contains(agentd.UsageKeys(), key):
			return nil, fieldError("group_by", "must be comma-separated keys among %v, not %q", agentd.UsageKeys(), clip(k, 64))
		case slices.Contains(by, key):
			return nil, fieldError("group_by", "names %s twice", key)
		}
		by = append(by, key)
	}
	return by, nil
}

// withCosts puts on each view its run's cost, and the tokens it wrote to
// the providers' prompt caches, by the ledger: one read for them all.
func (s *server) withCosts(ctx context.Context, views ...*runJSON) error {
	ids := make([]string, len(views))
	for i, v := range views {
		ids[i] = v.ID
	}
	costs, err := s.store.RunCosts(ctx, ids)
	if err != nil {
		return err
	}
	for _, v := range views {
		c := costs[v.ID]
		v.Cost, v.Usage.CacheWriteTokens = c.Cost, c.CacheWriteTokens
	}
	return nil
}

// costedView is the view of run with its cost.
func (s *server) costedView(ctx context.Context, run agentd.Run) (runJSON, error) {
	v := runView(run)
	err := s.withCosts(ctx, &v)
	return v, err
}

// pageCosts puts their costs on the runs of a page.
func (s *server) pageCosts(ctx context.Context, p *pageJSON[runJSON]) error {
	views := make([]*runJSON, len(p.Data))
	for i := range p.Data {
		views[i] = &p.Data[i]
	}
	return s.withCosts(ctx, views...)
}
