package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// memoryPut: agentctl memory put [-data JSON] [-expires T] [-if-version N]
// NAMESPACE KEY VALUE.
func memoryPut(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory put", "[flags] NAMESPACE KEY VALUE",
		"Write a memory item's next version. NAMESPACE is its path form, segments joined with \"/\"\n"+
			"(users/u-42/profile).")
	data := f.String("data", "", "JSON kept with the value, which search's -filter matches")
	expires := f.String("expires", "", "when the item expires: an RFC 3339 `time` or a duration from now (720h)")
	ifVersion := f.Int("if-version", -1, "write only over this `version` (0: only when no live item is there)")
	pos, code, ok := f.parse(args, 3, 3)
	if !ok {
		return code
	}
	p := client.MemoryPut{Namespace: agentd.ParseNamespace(pos[0]), Key: pos[1], Value: pos[2]}
	if *data != "" {
		if !json.Valid([]byte(*data)) {
			return f.usageError("-data is not JSON")
		}
		p.Data = json.RawMessage(*data)
	}
	if *expires != "" {
		t, err := timeOrDuration(*expires)
		if err != nil {
			return f.usageError("-expires: " + err.Error())
		}
		p.ExpiresAt = &t
	}
	if *ifVersion >= 0 {
		p.IfVersion = ifVersion
	}
	it, err := a.c.Memory().Put(ctx, p)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printMemoryItem(it)
}

// timeOrDuration reads an RFC 3339 time, or a duration from now.
func timeOrDuration(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return time.Now().Add(d), nil
}

// memoryGet: agentctl memory get [-as-of T] NAMESPACE KEY.
func memoryGet(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory get", "[-as-of T] NAMESPACE KEY", "Show a memory item: its current version, or the one current at -as-of.")
	asOf := f.String("as-of", "", "an RFC 3339 `time`, or a duration before now (1h)")
	pos, code, ok := f.parse(args, 2, 2)
	if !ok {
		return code
	}
	var at *time.Time
	if *asOf != "" {
		t, err := time.Parse(time.RFC3339Nano, *asOf)
		if err != nil {
			d, derr := time.ParseDuration(*asOf)
			if derr != nil {
				return f.usageError("-as-of is neither an RFC 3339 time nor a duration")
			}
			t = time.Now().Add(-d)
		}
		at = &t
	}
	it, err := a.c.Memory().Get(ctx, agentd.ParseNamespace(pos[0]), pos[1], at)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printMemoryItem(it)
}

// memoryVersions: agentctl memory versions [-limit N] [-cursor C]
// NAMESPACE KEY.
func memoryVersions(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory versions", "[-limit N] [-cursor C] NAMESPACE KEY",
		"List a memory item's versions, newest first, tombstones included, with who wrote each.")
	pg := f.pages("versions")
	pos, code, ok := pg.parse(args, 2, 2)
	if !ok {
		return code
	}
	p, err := a.c.Memory().Versions(ctx, agentd.ParseNamespace(pos[0]), pos[1], *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printMemoryItems(p)
}

// memoryList: agentctl memory ls [-limit N] [-cursor C] [PREFIX].
func memoryList(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory ls", "[-limit N] [-cursor C] [PREFIX]",
		"List the live memory items under a namespace prefix (all without one), by namespace then key.")
	pg := f.pages("items")
	pos, code, ok := pg.parse(args, 0, 1)
	if !ok {
		return code
	}
	var prefix agentd.Namespace
	if len(pos) == 1 {
		prefix = agentd.ParseNamespace(pos[0])
	}
	p, err := a.c.Memory().List(ctx, prefix, *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printMemoryItems(p)
}

// memorySearch: agentctl memory search [-prefix P] [-filter JSON]
// [-limit N] QUERY.
func memorySearch(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory search", "[flags] QUERY",
		"Search the live memory items: full text, and vectors when the server has an embedding model,\n"+
			"ranked together; best first.")
	prefix := f.String("prefix", "", "search under this namespace `prefix` only")
	filter := f.String("filter", "", "a JSON `object` that the items' data must contain")
	limit := f.Int("limit", 0, "the most items to show: `N` (default: the server's)")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	s := client.MemorySearch{Query: pos[0], Limit: *limit}
	if *prefix != "" {
		s.NamespacePrefix = agentd.ParseNamespace(*prefix)
	}
	if *filter != "" {
		if !json.Valid([]byte(*filter)) {
			return f.usageError("-filter is not JSON")
		}
		s.Filter = json.RawMessage(*filter)
	}
	hits, err := a.c.Memory().Search(ctx, s)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(hits)
	}
	tw := newTable(a.stdout)
	row(tw, "SCORE", "NAMESPACE", "KEY", "VALUE")
	for _, h := range hits {
		row(tw, strconv.FormatFloat(h.Score, 'f', 4, 64), h.Namespace.String(), h.Key, clipCell(h.Value, 60))
	}
	tw.Flush()
	return exitOK
}

// memoryRemove: agentctl memory rm [-if-version N] NAMESPACE KEY.
func memoryRemove(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory rm", "[-if-version N] NAMESPACE KEY",
		"Delete a memory item: its tombstone is its next version; the earlier ones stay readable.")
	ifVersion := f.Int("if-version", 0, "delete only this `version`")
	pos, code, ok := f.parse(args, 2, 2)
	if !ok {
		return code
	}
	it, err := a.c.Memory().Delete(ctx, agentd.ParseNamespace(pos[0]), pos[1], *ifVersion)
	if err != nil {
		return a.fail(ctx, err)
	}
	return a.printMemoryItem(it)
}

// memoryPurge: agentctl memory purge -confirm PREFIX PREFIX.
func memoryPurge(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory purge", "-confirm PREFIX PREFIX",
		"Remove every version of every memory item under a namespace prefix, for good (a user's right\n"+
			"to be forgotten); an audit entry keeps the counts, never the content.")
	confirm := f.String("confirm", "", "the `prefix` again: a purge cannot be undone")
	pos, code, ok := f.parse(args, 1, 1)
	if !ok {
		return code
	}
	if *confirm != pos[0] {
		return f.usageError("-confirm must repeat the prefix: a purge cannot be undone")
	}
	out, err := a.c.Memory().Purge(ctx, agentd.ParseNamespace(pos[0]))
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(out)
	}
	fmt.Fprintf(a.stdout, "purged %s: %d items, %d versions, %d bytes (audit %s)\n", pos[0], out.Items, out.Versions,
		out.Bytes, out.ID)
	return exitOK
}

// memoryExtractions: agentctl memory extractions [-run ID] [-limit N]
// [-cursor C].
func memoryExtractions(ctx context.Context, a *app, args []string) int {
	f := a.newFlags("memory extractions", "[-run ID] [-limit N] [-cursor C]",
		"List the extractions of memory from completed runs, newest first: each run's job, its status,\n"+
			"attempts and the items it wrote.")
	run := f.String("run", "", "only the extraction of the run with this `id`")
	pg := f.pages("extractions")
	if _, code, ok := pg.parse(args, 0, 0); !ok {
		return code
	}
	p, err := a.c.Memory().Extractions(ctx, *run, *pg.limit, *pg.cursor)
	if err != nil {
		return a.fail(ctx, err)
	}
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "ID", "RUN", "NAMESPACE", "STATUS", "ATTEMPTS", "ITEMS", "CREATED", "ERROR")
	for _, x := range p.Data {
		errText := ""
		if x.Error != nil {
			errText = clipCell(*x.Error, 60)
		}
		row(tw, x.ID, x.RunID, x.Namespace.String(), string(x.Status), strconv.Itoa(x.Attempts), strconv.Itoa(x.Items),
			x.CreatedAt.Format(time.RFC3339), errText)
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// printMemoryItem writes a memory item's version.
func (a *app) printMemoryItem(it *client.MemoryItem) int {
	if a.json {
		return a.printJSON(it)
	}
	kv := newKV(a.stdout)
	kv.line("namespace", it.Namespace.String())
	kv.line("key", it.Key)
	kv.line("version", strconv.Itoa(it.Version))
	if it.Deleted {
		kv.line("deleted", "yes")
	}
	kv.line("value", it.Value)
	kv.line("data", string(it.Data))
	kv.line("source", string(it.Source))
	kv.line("actor", it.Actor)
	kv.line("run", it.RunID)
	kv.line("created", it.CreatedAt.Format(time.RFC3339))
	kv.line("updated", it.UpdatedAt.Format(time.RFC3339))
	kv.line("expires", when(it.ExpiresAt))
	kv.flush()
	return exitOK
}

// printMemoryItems writes a page of memory items (or versions).
func (a *app) printMemoryItems(p *client.Page[client.MemoryItem]) int {
	if a.json {
		return a.printJSON(p)
	}
	tw := newTable(a.stdout)
	row(tw, "NAMESPACE", "KEY", "VERSION", "UPDATED", "SOURCE", "VALUE")
	for _, it := range p.Data {
		v := clipCell(it.Value, 60)
		if it.Deleted {
			v = "(deleted)"
		}
		row(tw, it.Namespace.String(), it.Key, strconv.Itoa(it.Version), it.UpdatedAt.Format(time.RFC3339), string(it.Source), v)
	}
	tw.Flush()
	a.printNext(p.HasMore, p.NextCursor)
	return exitOK
}

// clipCell cuts s to n runes, with an ellipsis.
func clipCell(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
