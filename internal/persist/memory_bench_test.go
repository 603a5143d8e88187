package persist_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// BenchmarkMemorySearch measures a search of one tenant's memory of 10,000
// and of 100,000 items (in 100 namespaces, each with a 64-dimension
// embedding; another tenant holds as many): full text alone, the exact
// vector ranking alone, and both (what a hybrid search asks of the
// store), over the whole tenant and under one namespace:
//
//	go test -run '^$' -bench MemorySearch -benchtime 50x ./internal/persist
func BenchmarkMemorySearch(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) { benchMemorySearch(b, n) })
	}
}

func benchMemorySearch(b *testing.B, n int) {
	s, url := persisttest.New(b)
	ctx := context.Background()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for _, tenant := range []string{"big", "other"} {
		if _, err := db.Exec(ctx, `INSERT INTO memory_items (tenant_id, namespace, key, version, value, source, bytes,
				embedding, embedding_model, created_at, updated_at)
			SELECT $1, 'users/u' || (i % 100), 'k' || i, 1,
				'note ' || i || ' about ' || (ARRAY['lisbon', 'porto', 'cats', 'chess', 'nurse', 'peanut', 'river', 'trip'])[1 + i % 8]
					|| ' and ' || (ARRAY['night', 'weekend', 'allergy', 'hospital', 'may', 'tofu', 'miso'])[1 + i % 7] || ' w' || (i % 997),
				'api', 40,
				(SELECT array_agg((random() - 0.5)::real) FROM generate_series(1, 64) d WHERE i > 0), 'm', now(), now()
			FROM generate_series(1, $2) i`, tenant, n); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Exec(ctx, `VACUUM ANALYZE memory_items`); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	vec := make([]float32, 64)
	for i := range vec {
		vec[i] = rng.Float32() - 0.5
	}
	for _, c := range []struct {
		name   string
		prefix agentd.Namespace
		query  string
		vector []float32
	}{
		{"text", nil, "lisbon allergy", nil},
		{"vector", nil, "", vec},
		{"hybrid", nil, "lisbon allergy", vec},
		{"hybrid/one-namespace", agentd.Namespace{"users", "u7"}, "lisbon allergy", vec},
	} {
		b.Run(c.name, func(b *testing.B) {
			p := agentd.MemorySearchParams{Prefix: c.prefix, Query: c.query, Vector: c.vector, EmbeddingModel: "m", Limit: 30}
			if c.query == "" {
				p.Query = "-" // no words: the text list is empty, the vector one ranks
			}
			for b.Loop() {
				hits, err := s.MemorySearch(ctx, "big", p)
				if err != nil || len(hits) == 0 {
					b.Fatalf("search: %v, %d hits", err, len(hits))
				}
			}
		})
	}
}
