package api_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

type memoryPage struct {
	Data       []agentd.MemoryItem `json:"data"`
	NextCursor *string             `json:"next_cursor"`
	HasMore    bool                `json:"has_more"`
}

func memorySetup(t *testing.T, limits agentd.MemoryLimits) *bundle {
	t.Helper()
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t), MemoryLimits: limits})
	return setupWith(t, store, store, func(c *api.Config) { c.Memory = memory.New(memory.Config{Store: store}) })
}

// TestMemoryRoutes: an item written, updated, read as of a time, listed,
// searched, deleted and purged through every route of /memory.
func TestMemoryRoutes(t *testing.T) {
	t.Parallel()
	b := memorySetup(t, agentd.MemoryLimits{})
	v1 := want[agentd.MemoryItem](t, b.do("PUT", "/memory/items",
		`{"namespace": ["users", "u1"], "key": "city", "value": "lives in Lisbon", "data": {"kind": "fact"}}`), http.StatusOK)
	if v1.Version != 1 || v1.Source != agentd.MemoryFromAPI || v1.Actor != "local" || v1.Namespace.String() != "users/u1" {
		t.Fatalf("first version: %+v", v1)
	}
	time.Sleep(5 * time.Millisecond)
	mid := time.Now().UTC().Format(time.RFC3339Nano)
	wantProblem(t, b.do("PUT", "/memory/items", `{"namespace": ["users", "u1"], "key": "city", "value": "x", "if_version": 2}`),
		http.StatusConflict, "memory_version_conflict")
	v2 := want[agentd.MemoryItem](t, b.do("PUT", "/memory/items",
		`{"namespace": ["users", "u1"], "key": "city", "value": "lives in Porto", "if_version": 1}`), http.StatusOK)
	if v2.Version != 2 || !v2.CreatedAt.Equal(v1.CreatedAt) {
		t.Fatalf("second version: %+v", v2)
	}
	item := "/memory/item?namespace=users/u1&key=city"
	if got := want[agentd.MemoryItem](t, b.do("GET", item, ""), http.StatusOK); got.Value != "lives in Porto" {
		t.Fatalf("get: %+v", got)
	}
	if got := want[agentd.MemoryItem](t, b.do("GET", item+"&as_of="+url.QueryEscape(mid), ""), http.StatusOK); got.Value != "lives in Lisbon" {
		t.Fatalf("as of: %+v", got)
	}
	p := want[memoryPage](t, b.do("GET", "/memory/item/versions?namespace=users/u1&key=city&limit=1", ""), http.StatusOK)
	if len(p.Data) != 1 || p.Data[0].Version != 2 || !p.HasMore {
		t.Fatalf("versions: %+v", p)
	}
	p = want[memoryPage](t, b.do("GET", "/memory/item/versions?namespace=users/u1&key=city&limit=1&cursor="+*p.NextCursor, ""), http.StatusOK)
	if len(p.Data) != 1 || p.Data[0].Version != 1 || p.HasMore {
		t.Fatalf("versions, page 2: %+v", p)
	}
	for _, k := range []string{"a/b", "pets", "diet"} {
		want[agentd.MemoryItem](t, b.do("PUT", "/memory/items", `{"namespace": ["users", "u1", "more"], "key": "`+k+`", "value": "cats and a diet"}`), http.StatusOK)
	}
	var keys []string
	cursor := ""
	for range 10 {
		p := want[memoryPage](t, b.do("GET", "/memory/items?prefix=users/u1&limit=2"+cursor, ""), http.StatusOK)
		for _, it := range p.Data {
			keys = append(keys, it.Namespace.String()+":"+it.Key)
		}
		if !p.HasMore {
			break
		}
		cursor = "&cursor=" + *p.NextCursor
	}
	if strings.Join(keys, " ") != "users/u1:city users/u1/more:a/b users/u1/more:diet users/u1/more:pets" {
		t.Fatalf("list: %v", keys)
	}
	found := want[searchResult](t, b.do("POST", "/memory/search", `{"namespace_prefix": ["users"], "query": "Porto diet", "limit": 2}`), http.StatusOK)
	if len(found.Data) != 2 || found.Data[0].TextRank != 1 || found.Data[0].Score <= 0 {
		t.Fatalf("search: %+v", found)
	}
	found = want[searchResult](t, b.do("POST", "/memory/search", `{"query": "Porto cats", "filter": {"kind": "fact"}}`), http.StatusOK)
	if len(found.Data) != 0 {
		t.Fatalf("search with a filter no version holds now: %+v", found)
	}
	tomb := want[agentd.MemoryItem](t, b.do("DELETE", item, ""), http.StatusOK)
	if !tomb.Deleted || tomb.Version != 3 {
		t.Fatalf("delete: %+v", tomb)
	}
	wantProblem(t, b.do("GET", item, ""), http.StatusNotFound, "memory_item_not_found")
	wantProblem(t, b.do("DELETE", item, ""), http.StatusNotFound, "memory_item_not_found")
	wantField(t, b.do("DELETE", "/memory/items?prefix=users", ""), "purge")
	wantField(t, b.do("DELETE", "/memory/items?prefix=users&purge=true&confirm=user", ""), "confirm")
	wantField(t, b.do("DELETE", "/memory/items?purge=true", ""), "prefix")
	purged := want[agentd.MemoryPurged](t, b.do("DELETE", "/memory/items?prefix=users&purge=true&confirm=users", ""), http.StatusOK)
	if purged.Items != 4 || purged.Versions != 6 {
		t.Fatalf("purge: %+v", purged)
	}
	if p := want[memoryPage](t, b.do("GET", "/memory/items", ""), http.StatusOK); len(p.Data) != 0 {
		t.Fatalf("after the purge: %+v", p)
	}
	wantProblem(t, b.do("GET", "/memory/item/versions?namespace=users/u1&key=city", ""), http.StatusNotFound, "memory_item_not_found")
}

type searchResult struct {
	Data []struct {
		Key      string  `json:"key"`
		Score    float64 `json:"score"`
		TextRank int     `json:"text_rank"`
	} `json:"data"`
}

func wantField(t *testing.T, r response, field string) {
	t.Helper()
	if p := wantProblem(t, r, http.StatusUnprocessableEntity, "invalid_field"); p.Field != field {
		t.Fatalf("field %q, want %q: %s", p.Field, field, r.body)
	}
}

// TestMemoryBadInput: what no item may be is refused as 4xx naming the
// field, never a 500.
func TestMemoryBadInput(t *testing.T) {
	t.Parallel()
	b := memorySetup(t, agentd.MemoryLimits{})
	for body, field := range map[string]string{
		`{"key": "k", "value": "v"}`:                                                           "namespace",
		`{"namespace": [], "key": "k", "value": "v"}`:                                          "namespace",
		`{"namespace": ["a/b"], "key": "k", "value": "v"}`:                                     "namespace",
		`{"namespace": ["a b"], "key": "k", "value": "v"}`:                                     "namespace",
		`{"namespace": ["1","2","3","4","5","6","7","8","9"], "key": "k", "value": "v"}`:       "namespace",
		`{"namespace": ["n"], "key": "", "value": "v"}`:                                        "key",
		`{"namespace": ["n"], "key": "` + strings.Repeat("k", 257) + `", "value": "v"}`:        "key",
		`{"namespace": ["n"], "key": "k"}`:                                                     "value",
		`{"namespace": ["n"], "key": "k", "value": "a\u0000b"}`:                                "value",
		`{"namespace": ["n"], "key": "k", "value": "v", "if_version": -1}`:                     "if_version",
		`{"namespace": ["n"], "key": "k", "value": "v", "expires_at": "2001-01-01T00:00:00Z"}`: "expires_at",
	} {
		wantField(t, b.do("PUT", "/memory/items", body), field)
	}
	if r := b.do("PUT", "/memory/items", `{"namespace": ["n"], "key": "k", "value": "v", "colour": 1}`); r.status != http.StatusUnprocessableEntity && r.status != http.StatusBadRequest {
		t.Fatalf("unknown field: %d %s", r.status, r.body)
	}
	wantProblem(t, b.do("PUT", "/memory/items", `{"namespace": ["n"]`), http.StatusBadRequest, "invalid_json")
	for path, field := range map[string]string{
		"/memory/item?key=k":                             "namespace",
		"/memory/item?namespace=&key=k":                  "namespace",
		"/memory/item?namespace=a//b&key=k":              "namespace",
		"/memory/item?namespace=a":                       "key",
		"/memory/item?namespace=a&key=k&as_of=yesterday": "as_of",
		"/memory/items?prefix=a//b":                      "prefix",
		"/memory/items?limit=0":                          "limit",
		"/memory/items?cursor=nonsense":                  "cursor",
		"/memory/items?cursor=" + base64.RawURLEncoding.EncodeToString([]byte("memory_items:a\x00\nk\xff")): "cursor",
		"/memory/item/versions?namespace=a&key=k&cursor=bm9wZQ":                                             "cursor",
	} {
		wantField(t, b.do("GET", path, ""), field)
	}
	wantProblem(t, b.do("GET", "/memory/items?namespace=a", ""), http.StatusBadRequest, "unknown_parameter")
	for body, field := range map[string]string{
		`{"filter": [1]}`:               "filter",
		`{"filter": "x"}`:               "filter",
		`{"limit": 0}`:                  "limit",
		`{"limit": 101}`:                "limit",
		`{"namespace_prefix": ["a/b"]}`: "namespace_prefix",
		`{"query": "` + strings.Repeat("q", 5000) + `"}`: "query",
	} {
		wantField(t, b.do("POST", "/memory/search", body), field)
	}
	wantField(t, b.do("DELETE", "/memory/item?namespace=a&key=k&if_version=0", ""), "if_version")
	// Odd but valid: any UTF-8 key, a search of punctuation.
	want[agentd.MemoryItem](t, b.do("PUT", "/memory/items", `{"namespace": ["n"], "key": "ключ/ü?&=", "value": "v"}`), http.StatusOK)
	want[agentd.MemoryItem](t, b.do("GET", "/memory/item?namespace=n&key="+url.QueryEscape("ключ/ü?&="), ""), http.StatusOK)
	want[json.RawMessage](t, b.do("POST", "/memory/search", `{"query": "!!! & | ' \\ :*"}`), http.StatusOK)
}

// TestMemoryLimitsRoute: a write past a limit is 422 memory_limit naming
// the limit.
func TestMemoryLimitsRoute(t *testing.T) {
	t.Parallel()
	b := memorySetup(t, agentd.MemoryLimits{ItemsPerNamespace: 1, BytesPerItem: 20})
	p := wantProblem(t, b.do("PUT", "/memory/items", `{"namespace": ["n"], "key": "k", "value": "`+strings.Repeat("v", 20)+`"}`),
		http.StatusUnprocessableEntity, "memory_limit")
	if !strings.Contains(string(b.do("PUT", "/memory/items", `{"namespace": ["n"], "key": "k", "value": "`+strings.Repeat("v", 20)+`"}`).body),
		`"limit":"bytes_per_item"`) || p.Detail == "" {
		t.Fatalf("limit: %+v", p)
	}
	want[agentd.MemoryItem](t, b.do("PUT", "/memory/items", `{"namespace": ["n"], "key": "k1", "value": "v"}`), http.StatusOK)
	if p := wantProblem(t, b.do("PUT", "/memory/items", `{"namespace": ["n"], "key": "k2", "value": "v"}`),
		http.StatusUnprocessableEntity, "memory_limit"); p.Limit != "items_per_namespace" {
		t.Fatalf("limit: %+v", p)
	}
}

// TestMemoryUnavailable: without memory, its routes answer 501.
func TestMemoryUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wantProblem(t, b.do("GET", "/memory/items", ""), http.StatusNotImplemented, "memory_unavailable")
	wantProblem(t, b.do("POST", "/memory/search", `{}`), http.StatusNotImplemented, "memory_unavailable")
}
