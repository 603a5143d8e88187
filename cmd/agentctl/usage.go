package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// usageList: agentctl usage [-from T] [-to T] [-by KEYS] [-tenant T].
func usageList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("usage", "[-from T] [-to T] [-by KEYS] [-tenant T]",
		"Show what the tenant's model calls used and cost, by the cost ledger: one row per group of\n"+
			"the -by keys (none: one row for all), from -from up to -to (default: this month, UTC).")
	from := f.String("from", "", "the first `time` counted: RFC 3339, or a date (its start, UTC)")
	to := f.String("to", "", "the `time` counting stops at: RFC 3339, or a date (counted whole, UTC)")
	by := f.String("by", "", "comma-separated `KEYS` among "+strings.Join(usageKeyNames(), ", "))
	tenant := f.String("tenant", "", "another `tenant`'s usage, or * for every tenant's (a key with the admin scope)")
	if _, code, ok := f.parse(args, 0, 0); !ok {
		return code
	}
	q := client.UsageQuery{Tenant: *tenant}
	var err error
	if q.From, err = usageTime(*from, false); err != nil {
		return f.usageError("-from: " + err.Error())
	}
	if q.To, err = usageTime(*to, true); err != nil {
		return f.usageError("-to: " + err.Error())
	}
	if *by != "" {
		for _, k := range strings.Split(*by, ",") {
			q.GroupBy = append(q.GroupBy, agentd.UsageKey(strings.TrimSpace(k)))
		}
	}
	rows, err := a.c.Usage(ctx, q)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(rows)
	}
	tw := newTable(a.stdout)
	var head []string
	for _, k := range q.GroupBy {
		head = append(head, strings.ToUpper(string(k)))
	}
	row(tw, append(head, "CALLS", "INPUT", "CACHED", "CACHE WRITE", "OUTPUT", "REASONING", "COST")...)
	for _, r := range rows {
		var cells []string
		for _, k := range q.GroupBy {
			cells = append(cells, cmpOr(r.Key(k), "-"))
		}
		cells = append(cells, itoa64(r.Calls), itoa64(r.InputTokens), itoa64(r.CachedInputTokens), itoa64(r.CacheWriteTokens),
			itoa64(r.OutputTokens), itoa64(r.ReasoningTokens), agentd.FormatCost(r.Cost))
		row(tw, cells...)
	}
	tw.Flush()
	return exitOK
}

func usageKeyNames() []string {
	var out []string
	for _, k := range agentd.UsageKeys() {
		out = append(out, string(k))
	}
	return out
}

// usageTime parses a -from or -to: RFC 3339, or a date, whose start it is
// (or, with end, the next day's start, so that the date counts whole); ""
// is the zero time (the server's default).
func usageTime(v string, end bool) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a date (2006-01-02)", v)
	}
	if end {
		d = d.AddDate(0, 0, 1)
	}
	return d, nil
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// budgetsGet: agentctl budgets get TENANT.
func budgetsGet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("budgets get", "TENANT",
		"Show a tenant's monthly budget (a key with the admin scope): its own, the server's default,\n"+
			"the one that applies, and what the tenant spent this month (UTC).")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	b, err := a.c.GetBudget(ctx, pos[0])
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printBudget(b)
}

// budgetsSet: agentctl budgets set TENANT AMOUNT|default.
func budgetsSet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("budgets set", "TENANT AMOUNT|default",
		"Set a tenant's monthly budget, in the currency of the models file's prices (a key with the\n"+
			"admin scope): AMOUNT (0: none, whatever the server's default), or default to remove the\n"+
			"tenant's own so that the server's default applies. Its runs are checked against it from\n"+
			"their next model call on.")
	pos, code, ok := f.parse(args, 2, 2)
	if !ok {
		return code
	}
	var monthly *float64
	if pos[1] != "default" {
		v, err := strconv.ParseFloat(pos[1], 64)
		if err != nil {
			return f.usageError(fmt.Sprintf("AMOUNT %q is not a number", pos[1]))
		}
		monthly = &v
	}
	b, err := a.c.SetBudget(ctx, pos[0], monthly)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printBudget(b)
}

// printBudget writes a tenant's budget.
func (a *app) printBudget(b *client.Budget) int {
	if a.json {
		return a.printJSON(b)
	}
	amount := func(v *float64, none string) string {
		if v == nil {
			return none
		}
		return agentd.FormatCost(*v)
	}
	k := newKV(a.stdout)
	k.line("tenant", b.TenantID)
	k.line("own", amount(b.Monthly, "none (the default applies)"))
	k.line("default", amount(b.Default, "none"))
	k.line("effective", amount(b.Effective, "none"))
	k.line("spent", agentd.FormatCost(b.Spent)+" this month (UTC)")
	k.flush()
	return exitOK
}
