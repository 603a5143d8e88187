package tenanttools_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/secrets"
	"github.com/agentd/agentd/internal/tenanttools"
	"github.com/agentd/agentd/internal/tools"
)

// TestCatalog: a tenant's registry holds the operator's tools and the
// tenant's own, another tenant's holds only the operator's; a registry is
// kept for its TTL, made again on a miss of a tool a run names, and at once
// after Forget; a row whose headers do not open (moved to another tenant)
// is offered as unavailable, its call failing, without taking the
// tenant's other tools with it.
func TestCatalog(t *testing.T) {
	t.Parallel()
	store := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t)})
	ctx := context.Background()
	base, err := tools.NewRegistry(tools.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, secrets.KeySize)
	rand.Read(key)
	box, _ := secrets.New(key)
	c := tenanttools.New(tenanttools.Config{Source: store, Base: base, Box: box, TTL: time.Hour})
	declare := func(tenant, name string, headers map[string]string) {
		t.Helper()
		sealed, err := c.Seal(tenant, name, headers)
		if err != nil {
			t.Fatal(err)
		}
		cfg, _ := json.Marshal(map[string]any{"url": "https://tools.example/" + name, "effect": "read_only"})
		if _, err := store.TenantToolCreate(ctx, agentd.TenantTool{TenantID: tenant, Name: name, Config: cfg, SealedHeaders: sealed,
			Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(tenant string, need ...string) []string {
		t.Helper()
		reg, err := c.For(ctx, tenant, need...)
		if err != nil {
			t.Fatal(err)
		}
		return reg.Names()
	}
	if got := names("acme"); len(got) != 1 || got[0] != "calculator" {
		t.Fatalf("before any tool: %v", got)
	}
	declare("acme", "crm", map[string]string{"Authorization": "Bearer x"})
	if got := names("acme"); len(got) != 1 {
		t.Fatalf("within the TTL the registry is kept: %v", got)
	}
	if got := names("acme", "crm"); len(got) != 2 || got[1] != "crm" {
		t.Fatalf("a miss of a named tool makes it again: %v", got)
	}
	if got := names("rival", "crm"); len(got) != 1 {
		t.Fatalf("rival's registry: %v", got)
	}
	// A row whose sealed headers were moved from another tenant's.
	row, err := store.TenantToolGet(ctx, "acme", agentd.ToolKindWebhook, "crm")
	if err != nil {
		t.Fatal(err)
	}
	row.TenantID, row.Name = "acme", "moved"
	if _, err := store.TenantToolCreate(ctx, row); err != nil {
		t.Fatal(err)
	}
	c.Forget("acme")
	reg, err := c.For(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := reg.Names(); len(got) != 3 {
		t.Fatalf("after Forget: %v", got)
	}
	moved, _ := reg.Get("moved")
	if _, err := moved.Invoke(ctx, tools.Call{Arguments: json.RawMessage(`{}`)}); err == nil {
		t.Fatal("a tool whose headers do not open was called")
	}
	if crm, _ := reg.Get("crm"); crm.Spec().Effect != agentd.EffectReadOnly {
		t.Fatalf("crm: %+v", crm.Spec())
	}
}
