package client_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestMemory: against a real server whose models file names the fake's
// embedding model, items are written, updated, read as of a time, listed,
// searched (full text and vectors, fused), deleted and purged through the
// SDK; a stale if_version is a 409 and a missing item a 404.
func TestMemory(t *testing.T) {
	t.Parallel()
	models := filepath.Join(t.TempDir(), "models.json")
	if err := os.WriteFile(models, []byte(`{"models": {}, "embeddings": {"model": "fake-embed", "dimensions": 32}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t), "AGENTD_MODELS_FILE="+models)
	ctx := context.Background()
	m := client.New("http://" + addr).Memory()
	ns := []string{"users", "u1"}
	v1, err := m.Put(ctx, client.MemoryPut{Namespace: ns, Key: "home", Value: "lives in Lisbon", Data: json.RawMessage(`{"kind":"fact"}`)})
	if err != nil || v1.Version != 1 {
		t.Fatalf("put: %+v %v", v1, err)
	}
	time.Sleep(10 * time.Millisecond)
	mid := time.Now()
	one := 1
	if _, err := m.Put(ctx, client.MemoryPut{Namespace: ns, Key: "home", Value: "lives in Porto", IfVersion: &one}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Put(ctx, client.MemoryPut{Namespace: ns, Key: "home", Value: "x", IfVersion: &one}); !client.IsCode(err, "memory_version_conflict") {
		t.Fatalf("stale if_version: %v", err)
	}
	for k, v := range map[string]string{"trip": "planning a trip to Lisbon in May", "pets": "two cats named Miso and Tofu"} {
		if _, err := m.Put(ctx, client.MemoryPut{Namespace: ns, Key: k, Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	if old, err := m.Get(ctx, ns, "home", &mid); err != nil || old.Value != "lives in Lisbon" {
		t.Fatalf("as of: %+v %v", old, err)
	}
	if vs, err := m.Versions(ctx, ns, "home", 0, ""); err != nil || len(vs.Data) != 2 {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	if page, err := m.List(ctx, []string{"users"}, 2, ""); err != nil || len(page.Data) != 2 || !page.HasMore {
		t.Fatalf("list: %+v %v", page, err)
	}
	hits, err := m.Search(ctx, client.MemorySearch{NamespacePrefix: []string{"users"}, Query: "Lisbon trip", Limit: 2})
	if err != nil || len(hits) != 2 || hits[0].Key != "trip" || hits[0].TextRank != 1 || hits[0].VectorRank != 1 || hits[0].Similarity == nil {
		t.Fatalf("hybrid search: %+v %v", hits, err)
	}
	if tomb, err := m.Delete(ctx, ns, "pets", 0); err != nil || !tomb.Deleted {
		t.Fatalf("delete: %+v %v", tomb, err)
	}
	if _, err := m.Get(ctx, ns, "pets", nil); !client.IsCode(err, "memory_item_not_found") {
		t.Fatalf("a deleted item: %v", err)
	}
	if p, err := m.Purge(ctx, []string{"users"}); err != nil || p.Items != 3 || p.Versions != 5 {
		t.Fatalf("purge: %+v %v", p, err)
	}
	if page, err := m.List(ctx, nil, 0, ""); err != nil || len(page.Data) != 0 {
		t.Fatalf("after the purge: %+v %v", page, err)
	}
}
