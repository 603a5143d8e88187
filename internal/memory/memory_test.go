package memory_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/memory"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

func TestFuse(t *testing.T) {
	t.Parallel()
	hit := func(key string, text, vec int) agentd.MemoryHit {
		return agentd.MemoryHit{Item: agentd.MemoryItem{Key: key}, TextRank: text, VectorRank: vec}
	}
	got := memory.Fuse([]agentd.MemoryHit{hit("a", 1, 0), hit("b", 2, 1), hit("c", 3, 3), hit("d", 0, 2)}, 3)
	var keys []string
	for _, h := range got {
		keys = append(keys, h.Item.Key)
	}
	// b: 1/62+1/61; c: 1/63+1/63; a: 1/61; d: 1/62.
	if strings.Join(keys, " ") != "b c a" || got[0].Score <= got[1].Score {
		t.Fatalf("fused: %v %+v", keys, got)
	}
}

// corpus is a small fixed corpus of one user's memory.
var corpus = map[string]string{
	"diet":    "vegetarian, allergic to peanuts",
	"home":    "lives in Lisbon near the river",
	"pets":    "two cats named Miso and Tofu",
	"job":     "nurse working night shifts at the hospital",
	"trip":    "planning a trip to Lisbon in May",
	"hobby":   "plays chess on weekends",
	"allergy": "peanut allergy is severe, carries an epipen",
}

type bundle struct {
	text   *memory.Service // full text alone
	hybrid *memory.Service // with the fake's embeddings
}

func setup(t *testing.T) bundle {
	t.Helper()
	store, _ := persisttest.New(t)
	fake := httptest.NewServer(fakellm.New())
	t.Cleanup(fake.Close)
	emb := memory.NewOpenAI(memory.OpenAIConfig{BaseURL: fake.URL + "/v1", APIKey: "fake", Model: "fake-embed", Dimensions: 64})
	b := bundle{text: memory.New(memory.Config{Store: store}), hybrid: memory.New(memory.Config{Store: store, Embedder: emb})}
	for k, v := range corpus {
		if _, err := b.hybrid.Put(context.Background(), "a", agentd.MemoryWrite{Namespace: agentd.Namespace{"users", "u1"},
			Key: k, Value: v, Source: agentd.MemoryFromAPI}); err != nil {
			t.Fatal(err)
		}
	}
	// Another tenant's near-identical item must never be found.
	if _, err := b.hybrid.Put(context.Background(), "b", agentd.MemoryWrite{Namespace: agentd.Namespace{"users", "u1"},
		Key: "home", Value: "lives in Lisbon near the river", Source: agentd.MemoryFromAPI}); err != nil {
		t.Fatal(err)
	}
	return b
}

func keys(t *testing.T, s *memory.Service, query string, limit int) []string {
	t.Helper()
	hits, err := s.Search(context.Background(), "a", agentd.MemorySearchParams{Prefix: agentd.Namespace{"users"}, Query: query}, limit)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range hits {
		out = append(out, h.Item.Key)
	}
	return out
}

// TestSearchRanking: on a fixed corpus, full text alone finds the items
// holding the query's words, the one with more of them first; hybrid
// search (the fake's embeddings, near for shared words) agrees, and fuses
// both ranks.
func TestSearchRanking(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if got := keys(t, b.text, "Lisbon trip", 5); strings.Join(got, " ") != "trip home" {
		t.Fatalf("full text, Lisbon trip: %v", got)
	}
	if got := keys(t, b.text, "peanuts", 5); strings.Join(got, " ") != "diet" {
		t.Fatalf("full text, peanuts (simple: no stemming): %v", got)
	}
	got := keys(t, b.hybrid, "Lisbon trip", 3)
	if len(got) != 3 || got[0] != "trip" || got[1] != "home" {
		t.Fatalf("hybrid, Lisbon trip: %v", got)
	}
	hits, err := b.hybrid.Search(context.Background(), "a", agentd.MemorySearchParams{Query: "Lisbon trip"}, 2)
	if err != nil || len(hits) != 2 || hits[0].TextRank != 1 || hits[0].VectorRank != 1 || hits[0].Similarity <= hits[1].Similarity {
		t.Fatalf("hybrid ranks: %v %+v", err, hits)
	}
	// A query word no item holds finds nothing by text; the vector still
	// ranks the items that share its other words.
	got = keys(t, b.hybrid, "severe allergy emergency", 2)
	if len(got) == 0 || got[0] != "allergy" {
		t.Fatalf("hybrid, severe allergy emergency: %v", got)
	}
	for _, s := range []*memory.Service{b.text, b.hybrid} {
		hits, err := s.Search(context.Background(), "b", agentd.MemorySearchParams{Query: "Lisbon peanut cats"}, 10)
		if err != nil || len(hits) != 1 || hits[0].Item.Key != "home" {
			t.Fatalf("tenant b's search: %v %+v", err, hits)
		}
	}
}
