package persist_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

func ns(path string) agentd.Namespace { return agentd.ParseNamespace(path) }

func put(t *testing.T, s *persist.Store, tenant string, w agentd.MemoryWrite) agentd.MemoryItem {
	t.Helper()
	if w.Source == "" {
		w.Source = agentd.MemoryFromAPI
	}
	it, err := s.MemoryPut(context.Background(), tenant, w)
	if err != nil {
		t.Fatalf("put %s/%s: %v", w.Namespace, w.Key, err)
	}
	return it
}

func usage(t *testing.T, s *persist.Store, tenant string) agentd.MemoryUsage {
	t.Helper()
	us, err := s.MemoryUsage(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) == 0 {
		return agentd.MemoryUsage{Tenant: tenant}
	}
	return us[0]
}

// TestMemoryVersions: every write is a version, a delete a tombstone, and
// an item reads as of any time; the counters follow.
func TestMemoryVersions(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	at := ns("users/u1/profile")
	v1 := put(t, s, "a", agentd.MemoryWrite{Namespace: at, Key: "city", Value: "Lisbon", Actor: "key:k1"})
	time.Sleep(5 * time.Millisecond)
	mid := time.Now()
	time.Sleep(5 * time.Millisecond)
	v2 := put(t, s, "a", agentd.MemoryWrite{Namespace: at, Key: "city", Value: "Porto", Data: json.RawMessage(`{"c":1}`),
		Source: agentd.MemoryFromAgent, RunID: agentd.NewID(), Step: 3, ToolCallID: "call_1"})
	if v1.Version != 1 || v2.Version != 2 || !v2.CreatedAt.Equal(v1.CreatedAt) || !v2.UpdatedAt.After(v1.UpdatedAt) {
		t.Fatalf("versions: %+v %+v", v1, v2)
	}
	got, err := s.MemoryGet(ctx, "a", at, "city", agentd.MemoryRead{})
	if err != nil || got.Value != "Porto" || got.Version != 2 || got.Source != agentd.MemoryFromAgent || got.Step != 3 ||
		got.ToolCallID != "call_1" || string(got.Data) != `{"c": 1}` || !got.CreatedAt.Equal(v1.CreatedAt) {
		t.Fatalf("get: %v %+v", err, got)
	}
	old, err := s.MemoryGet(ctx, "a", at, "city", agentd.MemoryRead{AsOf: &mid})
	if err != nil || old.Value != "Lisbon" || old.Version != 1 || old.Actor != "key:k1" {
		t.Fatalf("as of: %v %+v", err, old)
	}
	before := v1.UpdatedAt.Add(-time.Millisecond)
	if _, err := s.MemoryGet(ctx, "a", at, "city", agentd.MemoryRead{AsOf: &before}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("as of before the first version: %v", err)
	}
	if u := usage(t, s, "a"); u.Items != 1 || u.Bytes != int64(v1.Bytes+v2.Bytes) {
		t.Fatalf("usage after two versions: %+v", u)
	}
	if _, err := s.MemoryDelete(ctx, "a", agentd.MemoryDeleteParams{Namespace: at, Key: "city", IfVersion: ptr(1),
		Source: agentd.MemoryFromAPI}); !errors.Is(err, agentd.ErrMemoryConflict) {
		t.Fatalf("delete with a stale if_version: %v", err)
	}
	tomb, err := s.MemoryDelete(ctx, "a", agentd.MemoryDeleteParams{Namespace: at, Key: "city", Source: agentd.MemoryFromAPI})
	if err != nil || tomb.Version != 3 || !tomb.Deleted {
		t.Fatalf("delete: %v %+v", err, tomb)
	}
	if _, err := s.MemoryGet(ctx, "a", at, "city", agentd.MemoryRead{}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("get a deleted item: %v", err)
	}
	if _, err := s.MemoryDelete(ctx, "a", agentd.MemoryDeleteParams{Namespace: at, Key: "city", Source: agentd.MemoryFromAPI}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if old, err := s.MemoryGet(ctx, "a", at, "city", agentd.MemoryRead{AsOf: &mid}); err != nil || old.Value != "Lisbon" {
		t.Fatalf("as of, after the delete: %v %+v", err, old)
	}
	vs, err := s.MemoryVersions(ctx, "a", at, "city", agentd.MemoryRead{})
	if err != nil || len(vs) != 3 || vs[0].Version != 3 || !vs[0].Deleted || vs[2].Value != "Lisbon" {
		t.Fatalf("versions: %v %+v", err, vs)
	}
	if page, err := s.MemoryVersions(ctx, "a", at, "city", agentd.MemoryRead{Before: 3, Limit: 1}); err != nil ||
		len(page) != 1 || page[0].Version != 2 {
		t.Fatalf("versions page: %v %+v", err, page)
	}
	if u := usage(t, s, "a"); u.Items != 0 {
		t.Fatalf("usage after the delete: %+v", u)
	}
	// A write after a tombstone goes on numbering; if_version 0 asks that
	// no live item be there.
	v4 := put(t, s, "a", agentd.MemoryWrite{Namespace: at, Key: "city", Value: "Faro", IfVersion: ptr(0)})
	if v4.Version != 4 || !v4.CreatedAt.Equal(v1.CreatedAt) {
		t.Fatalf("after the tombstone: %+v", v4)
	}
	if _, err := s.MemoryPut(ctx, "a", agentd.MemoryWrite{Namespace: at, Key: "city", Value: "x", IfVersion: ptr(3),
		Source: agentd.MemoryFromAPI}); !errors.Is(err, agentd.ErrMemoryConflict) {
		t.Fatalf("put with a stale if_version: %v", err)
	}
	if _, err := s.MemoryGet(ctx, "b", at, "city", agentd.MemoryRead{}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("another tenant's get: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestMemoryConcurrentWrites: writes of one item take turns; none is
// lost, and the versions have no gap.
func TestMemoryConcurrentWrites(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.MemoryPut(context.Background(), "a", agentd.MemoryWrite{Namespace: ns("n"), Key: "k",
				Value: strings.Repeat("v", i+1), Source: agentd.MemoryFromAPI}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	vs, err := s.MemoryVersions(context.Background(), "a", ns("n"), "k", agentd.MemoryRead{})
	if err != nil || len(vs) != 10 || vs[0].Version != 10 {
		t.Fatalf("versions: %v %d", err, len(vs))
	}
	if u := usage(t, s, "a"); u.Items != 1 {
		t.Fatalf("usage: %+v", u)
	}
}

// TestMemoryListAndReach: a list pages the live items under a prefix,
// and never shows a namespace the view does not reach.
func TestMemoryListAndReach(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	for _, p := range []string{"users/u1", "users/u1/notes", "users/u10", "users/u1-x", "users/u2", "org"} {
		put(t, s, "a", agentd.MemoryWrite{Namespace: ns(p), Key: "k1", Value: "v " + p})
		put(t, s, "a", agentd.MemoryWrite{Namespace: ns(p), Key: "k2", Value: "w " + p})
	}
	put(t, s, "b", agentd.MemoryWrite{Namespace: ns("users/u1"), Key: "k3", Value: "b's"})
	list := func(p agentd.MemoryListParams) []string {
		t.Helper()
		items, err := s.MemoryList(ctx, "a", p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, it.Namespace.String()+":"+it.Key)
		}
		return out
	}
	got := list(agentd.MemoryListParams{Prefix: ns("users/u1")})
	if strings.Join(got, " ") != "users/u1:k1 users/u1:k2 users/u1/notes:k1 users/u1/notes:k2" {
		t.Fatalf("under users/u1: %v", got)
	}
	page := list(agentd.MemoryListParams{Prefix: ns("users"), Limit: 3})
	// Namespaces sort by their path form's bytes: "users/u1-x" before
	// "users/u1/notes".
	next := list(agentd.MemoryListParams{Prefix: ns("users"), Limit: 3, AfterNamespace: ns("users/u1-x"), AfterKey: "k1"})
	if len(page) != 3 || page[2] != "users/u1-x:k1" || len(next) != 3 || next[0] != "users/u1-x:k2" {
		t.Fatalf("pages: %v %v", page, next)
	}
	view := agentd.MemoryView{Allowed: []agentd.Namespace{ns("users/u2"), ns("org")}}
	got = list(agentd.MemoryListParams{MemoryView: view})
	if strings.Join(got, " ") != "org:k1 org:k2 users/u2:k1 users/u2:k2" {
		t.Fatalf("reach: %v", got)
	}
	if got := list(agentd.MemoryListParams{MemoryView: agentd.MemoryView{Allowed: []agentd.Namespace{}}}); len(got) != 0 {
		t.Fatalf("an empty reach: %v", got)
	}
	if _, err := s.MemoryGet(ctx, "a", ns("users/u1"), "k1", agentd.MemoryRead{MemoryView: view}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("get out of reach: %v", err)
	}
	if _, err := s.MemoryPut(ctx, "a", agentd.MemoryWrite{MemoryView: view, Namespace: ns("users/u1"), Key: "k",
		Value: "x", Source: agentd.MemoryFromAgent}); !errors.Is(err, agentd.ErrMemoryOutOfReach) {
		t.Fatalf("put out of reach: %v", err)
	}
	hits, err := s.MemorySearch(ctx, "a", agentd.MemorySearchParams{MemoryView: view, Query: "users u1 v w"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		if !view.Reaches(h.Item.Namespace) {
			t.Fatalf("search found %s out of reach", h.Item.Namespace)
		}
	}
	if got := list(agentd.MemoryListParams{}); len(got) != 12 {
		t.Fatalf("tenant a's items: %v", got)
	}
}

// TestMemoryOverlay: a fork's overlay reads real memory as of its base
// with its own versions over it; its writes and deletes reach nobody
// else, and real memory's later writes do not reach it.
func TestMemoryOverlay(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("u"), Key: "color", Value: "blue"})
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("u"), Key: "pet", Value: "cat"})
	time.Sleep(5 * time.Millisecond)
	fork := agentd.MemoryView{Overlay: agentd.NewID(), Base: time.Now()}
	time.Sleep(5 * time.Millisecond)
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("u"), Key: "color", Value: "green"}) // after the fork
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("u"), Key: "late", Value: "after the fork"})

	got, err := s.MemoryGet(ctx, "a", ns("u"), "color", agentd.MemoryRead{MemoryView: fork})
	if err != nil || got.Value != "blue" {
		t.Fatalf("the fork reads real memory as of its base: %v %+v", err, got)
	}
	if _, err := s.MemoryGet(ctx, "a", ns("u"), "late", agentd.MemoryRead{MemoryView: fork}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("a later real write reached the fork: %v", err)
	}
	w := put(t, s, "a", agentd.MemoryWrite{MemoryView: fork, Namespace: ns("u"), Key: "color", Value: "red", IfVersion: ptr(1)})
	if w.Version != 2 || w.Overlay != fork.Overlay {
		t.Fatalf("the fork's write: %+v", w)
	}
	put(t, s, "a", agentd.MemoryWrite{MemoryView: fork, Namespace: ns("u"), Key: "fork-only", Value: "mine"})
	if _, err := s.MemoryDelete(ctx, "a", agentd.MemoryDeleteParams{MemoryView: fork, Namespace: ns("u"), Key: "pet",
		Source: agentd.MemoryFromAgent}); err != nil {
		t.Fatal(err)
	}
	keys := func(v agentd.MemoryView) string {
		items, err := s.MemoryList(ctx, "a", agentd.MemoryListParams{MemoryView: v})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, it.Key+"="+it.Value)
		}
		return strings.Join(out, " ")
	}
	if got := keys(fork); got != "color=red fork-only=mine" {
		t.Fatalf("the fork's list: %s", got)
	}
	if got := keys(agentd.MemoryView{}); got != "color=green late=after the fork pet=cat" {
		t.Fatalf("real memory's list: %s", got)
	}
	hits, err := s.MemorySearch(ctx, "a", agentd.MemorySearchParams{MemoryView: fork, Query: "red mine cat green"})
	if err != nil || len(hits) != 2 {
		t.Fatalf("the fork's search: %v %+v", err, hits)
	}
	real, err := s.MemorySearch(ctx, "a", agentd.MemorySearchParams{Query: "red mine cat green"})
	if err != nil || len(real) != 2 || real[0].Item.Overlay != "" {
		t.Fatalf("real memory's search: %v %+v", err, real)
	}
	other := agentd.MemoryView{Overlay: agentd.NewID(), Base: fork.Base}
	if got := keys(other); got != "color=blue pet=cat" {
		t.Fatalf("another overlay sees the first one's writes: %s", got)
	}
	vs, err := s.MemoryVersions(ctx, "a", ns("u"), "color", agentd.MemoryRead{MemoryView: fork})
	if err != nil || len(vs) != 2 || vs[0].Value != "red" || vs[1].Value != "blue" {
		t.Fatalf("the fork's versions: %v %+v", err, vs)
	}
}

// TestMemoryPurge: a purge removes every version of every item under
// the prefix, of real memory and overlays, leaves no row that holds the
// content, writes an audit row of counts, and moves the counters.
func TestMemoryPurge(t *testing.T) {
	t.Parallel()
	s, url := persisttest.New(t)
	ctx := context.Background()
	secret := "the-secret-" + agentd.NewID()
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("users/u1"), Key: "a", Value: secret + " one",
		Embedding: []float32{1, 0}, EmbeddingModel: "m"})
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("users/u1"), Key: "a", Value: secret + " two"})
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("users/u1/deep"), Key: "b", Value: secret, Data: json.RawMessage(`{"s":"` + secret + `"}`)})
	put(t, s, "a", agentd.MemoryWrite{MemoryView: agentd.MemoryView{Overlay: agentd.NewID()}, Namespace: ns("users/u1"), Key: "c", Value: secret})
	keep := put(t, s, "a", agentd.MemoryWrite{Namespace: ns("users/u10"), Key: "a", Value: "kept"})
	put(t, s, "b", agentd.MemoryWrite{Namespace: ns("users/u1"), Key: "a", Value: "b's own"})
	out, err := s.MemoryPurge(ctx, "a", agentd.MemoryPurgeParams{Prefix: ns("users/u1"), Actor: "key:admin"})
	if err != nil || out.Items != 3 || out.Versions != 4 || out.ID == "" {
		t.Fatalf("purge: %v %+v", err, out)
	}
	for _, table := range []string{"memory_items", "memory_versions", "memory_purges", "memory_usage"} {
		for _, row := range persisttest.TableText(t, url, table) {
			if strings.Contains(row, "the-secret-") {
				t.Errorf("%s keeps the purged content: %s", table, row)
			}
		}
	}
	if u := usage(t, s, "a"); u.Items != 1 || u.Bytes != int64(keep.Bytes) {
		t.Fatalf("usage after the purge: %+v", u)
	}
	if u := usage(t, s, "b"); u.Items != 1 {
		t.Fatalf("another tenant's usage: %+v", u)
	}
	audit := persisttest.TableText(t, url, "memory_purges")
	if len(audit) != 1 || !strings.Contains(audit[0], "users/u1") || !strings.Contains(audit[0], "key:admin") {
		t.Fatalf("audit: %v", audit)
	}
	if _, err := s.MemoryGet(ctx, "b", ns("users/u1"), "a", agentd.MemoryRead{}); err != nil {
		t.Fatalf("another tenant's item: %v", err)
	}
	if _, err := s.MemoryPurge(ctx, "a", agentd.MemoryPurgeParams{Prefix: ns("users"),
		Allowed: []agentd.Namespace{ns("users/u2")}}); !errors.Is(err, agentd.ErrMemoryOutOfReach) {
		t.Fatalf("purge out of reach: %v", err)
	}
}

// TestMemoryLimits: the limits refuse a write past them, naming the
// limit, and nothing of it is kept.
func TestMemoryLimits(t *testing.T) {
	t.Parallel()
	u := persisttest.NewDatabase(t)
	s := persisttest.Open(t, persist.Config{URL: u, MemoryLimits: agentd.MemoryLimits{ItemsPerNamespace: 2,
		BytesPerItem: 100, BytesPerTenant: 300}})
	ctx := context.Background()
	limit := func(err error) agentd.MemoryLimit {
		var le *agentd.MemoryLimitError
		if !errors.As(err, &le) {
			t.Fatalf("want a limit error, got %v", err)
		}
		return le.Limit
	}
	w := func(n, k string, size int) agentd.MemoryWrite {
		return agentd.MemoryWrite{Namespace: ns(n), Key: k, Value: strings.Repeat("x", size-len(k)), Source: agentd.MemoryFromAPI}
	}
	_, err := s.MemoryPut(ctx, "a", w("n", "k", 101))
	if l := limit(err); l != agentd.LimitBytesPerItem {
		t.Fatalf("limit %s", l)
	}
	put(t, s, "a", w("n", "k1", 50))
	put(t, s, "a", w("n", "k2", 50))
	_, err = s.MemoryPut(ctx, "a", w("n", "k3", 50))
	if l := limit(err); l != agentd.LimitItemsPerNamespace {
		t.Fatalf("limit %s", l)
	}
	put(t, s, "a", w("n", "k1", 60)) // an update is no new item
	put(t, s, "a", w("m", "k1", 100))
	_, err = s.MemoryPut(ctx, "a", w("m", "k2", 50))
	if l := limit(err); l != agentd.LimitBytesPerTenant {
		t.Fatalf("limit %s", l)
	}
	if got := usage(t, s, "a"); got.Items != 3 || got.Bytes != 260 {
		t.Fatalf("usage: %+v", got)
	}
	// Tenant b has its own bytes.
	put(t, s, "b", w("m", "k1", 100))
	// A retention pass that keeps one version frees the older bytes.
	n, err := s.MemoryRetentionPass(ctx, agentd.MemoryRetention{Keep: 1})
	if err != nil || n != 1 {
		t.Fatalf("retention: %v %d", err, n)
	}
	if got := usage(t, s, "a"); got.Items != 3 || got.Bytes != 210 {
		t.Fatalf("usage after retention: %+v", got)
	}
	put(t, s, "a", w("m", "k2", 50))
}

// TestMemoryRetention: a pass removes versions past retention, never an
// item's current one, and removes expired items whole.
func TestMemoryRetention(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	for i := range 5 {
		put(t, s, "a", agentd.MemoryWrite{Namespace: ns("n"), Key: "k", Value: strings.Repeat("v", i+1)})
	}
	past := time.Now().Add(-time.Second)
	put(t, s, "a", agentd.MemoryWrite{Namespace: ns("n"), Key: "gone", Value: "expired", ExpiresAt: &past})
	if _, err := s.MemoryGet(ctx, "a", ns("n"), "gone", agentd.MemoryRead{}); !errors.Is(err, agentd.ErrMemoryNotFound) {
		t.Fatalf("an expired item: %v", err)
	}
	if n, err := s.MemoryRetentionPass(ctx, agentd.MemoryRetention{MaxAge: time.Hour}); err != nil || n != 1 {
		t.Fatalf("a pass that only expires: %v %d", err, n)
	}
	if n, err := s.MemoryRetentionPass(ctx, agentd.MemoryRetention{Keep: 2}); err != nil || n != 3 {
		t.Fatalf("keep 2: %v %d", err, n)
	}
	if n, err := s.MemoryRetentionPass(ctx, agentd.MemoryRetention{MaxAge: time.Nanosecond}); err != nil || n != 1 {
		t.Fatalf("max age: %v %d", err, n)
	}
	vs, err := s.MemoryVersions(ctx, "a", ns("n"), "k", agentd.MemoryRead{})
	if err != nil || len(vs) != 1 || vs[0].Version != 5 {
		t.Fatalf("versions left: %v %+v", err, vs)
	}
	if u := usage(t, s, "a"); u.Items != 1 || u.Bytes != int64(vs[0].Bytes) {
		t.Fatalf("usage: %+v", u)
	}
}

// TestMemorySearchText: full-text search over a small fixed corpus ranks
// the item that holds more of the query's words first, and filters on
// data.
func TestMemorySearchText(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	corpus := map[string]string{
		"diet":   "The user is vegetarian and allergic to peanuts",
		"city":   "The user lives in Lisbon, Portugal",
		"pets":   "The user has two cats named Miso and Tofu",
		"work":   "The user works as a nurse on night shifts",
		"travel": "Next trip: Lisbon in May, vegetarian restaurants wanted",
	}
	for k, v := range corpus {
		put(t, s, "a", agentd.MemoryWrite{Namespace: ns("users/u1"), Key: k, Value: v,
			Data: json.RawMessage(`{"kind":"` + map[bool]string{true: "plan", false: "fact"}[k == "travel"] + `"}`)})
	}
	put(t, s, "b", agentd.MemoryWrite{Namespace: ns("users/u1"), Key: "city", Value: "Lisbon Lisbon vegetarian"})
	search := func(q string, filter string) []string {
		p := agentd.MemorySearchParams{Prefix: ns("users"), Query: q}
		if filter != "" {
			p.Filter = json.RawMessage(filter)
		}
		hits, err := s.MemorySearch(ctx, "a", p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for i, h := range hits {
			if h.TextRank != i+1 || h.TextScore <= 0 {
				t.Fatalf("hit %d: %+v", i, h)
			}
			out = append(out, h.Item.Key)
		}
		return out
	}
	if got := search("vegetarian in Lisbon", ""); len(got) != 3 || got[0] != "travel" {
		t.Fatalf("vegetarian in Lisbon: %v", got)
	}
	if got := search("cats", ""); strings.Join(got, " ") != "pets" {
		t.Fatalf("cats: %v", got)
	}
	if got := search("vegetarian in Lisbon", `{"kind":"fact"}`); len(got) != 2 || got[0] == "travel" {
		t.Fatalf("filtered: %v", got)
	}
	if got := search("!!!", ""); len(got) != 0 {
		t.Fatalf("no words: %v", got)
	}
	all, err := s.MemorySearch(ctx, "a", agentd.MemorySearchParams{Limit: 2})
	if err != nil || len(all) != 2 {
		t.Fatalf("no query: %v %d", err, len(all))
	}
}
