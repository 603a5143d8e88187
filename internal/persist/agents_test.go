package persist_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestAgentVersions: an agent is made at version 1, once per tenant name
// (another tenant's of the same name is its own); each update is the next
// version, concurrent ones included, each recording its actor; a version
// it does not have is an AgentVersionError naming its latest; a deleted
// agent is not found, keeps its versions, and made again goes on from its
// last.
func TestAgentVersions(t *testing.T) {
	t.Parallel()
	s := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t)})
	ctx := context.Background()
	def := func(tenant, instr, actor string) agentd.AgentDefine {
		return agentd.AgentDefine{TenantID: tenant, Name: "helper", Definition: []byte(`{"instructions":"` + instr + `"}`), Actor: actor}
	}
	a, err := s.AgentCreate(ctx, def("t1", "one", "key:a"), nil)
	if err != nil || a.Version != 1 || a.LatestVersion != 1 || a.Actor != "key:a" {
		t.Fatalf("create: %+v %v", a, err)
	}
	if _, err := s.AgentCreate(ctx, def("t1", "again", "key:a"), nil); !errors.Is(err, agentd.ErrAgentExists) {
		t.Fatalf("created twice: %v", err)
	}
	if b, err := s.AgentCreate(ctx, def("t2", "theirs", "key:b"), nil); err != nil || b.Version != 1 {
		t.Fatalf("another tenant's: %+v %v", b, err)
	}
	if _, err := s.AgentUpdate(ctx, agentd.AgentDefine{TenantID: "t1", Name: "nobody", Definition: []byte(`{}`)}, nil); !errors.Is(err, agentd.ErrAgentNotFound) {
		t.Fatalf("update of no agent: %v", err)
	}
	var wg sync.WaitGroup
	versions := make([]int, 8)
	for i := range versions {
		wg.Go(func() {
			u, err := s.AgentUpdate(ctx, def("t1", "next", "key:c"), nil)
			if err != nil {
				t.Error(err)
			}
			versions[i] = u.Version
		})
	}
	wg.Wait()
	slices.Sort(versions)
	if !slices.Equal(versions, []int{2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("concurrent updates made versions %v", versions)
	}
	latest, err := s.AgentGet(ctx, "t1", "helper", 0)
	if err != nil || latest.Version != 9 || latest.Actor != "key:c" {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	first, err := s.AgentGet(ctx, "t1", "helper", 1)
	if err != nil || string(first.Definition) != `{"instructions": "one"}` || first.LatestVersion != 9 {
		t.Fatalf("version 1: %+v %s %v", first, first.Definition, err)
	}
	var noVersion *agentd.AgentVersionError
	if _, err := s.AgentGet(ctx, "t1", "helper", 10); !errors.As(err, &noVersion) || noVersion.Latest != 9 || !errors.Is(err, agentd.ErrAgentNotFound) {
		t.Fatalf("version 10: %v", err)
	}
	page, err := s.AgentVersions(ctx, "t1", "helper", 9, 3)
	if err != nil || len(page) != 3 || page[0].Version != 8 || page[2].Version != 6 {
		t.Fatalf("versions before 9: %+v %v", page, err)
	}
	if list, err := s.AgentList(ctx, "t2", "", 10); err != nil || len(list) != 1 || string(list[0].Definition) != `{"instructions": "theirs"}` {
		t.Fatalf("t2's list: %+v %v", list, err)
	}

	if err := s.AgentDelete(ctx, "t1", "helper", "key:d"); err != nil {
		t.Fatal(err)
	}
	if err := s.AgentDelete(ctx, "t1", "helper", "key:d"); !errors.Is(err, agentd.ErrAgentNotFound) {
		t.Fatalf("deleted twice: %v", err)
	}
	for _, v := range []int{0, 1} {
		if _, err := s.AgentGet(ctx, "t1", "helper", v); !errors.Is(err, agentd.ErrAgentNotFound) || errors.As(err, &noVersion) {
			t.Fatalf("version %d of a deleted agent: %v", v, err)
		}
	}
	if _, err := s.AgentVersions(ctx, "t1", "helper", 0, 10); !errors.Is(err, agentd.ErrAgentNotFound) {
		t.Fatalf("versions of a deleted agent: %v", err)
	}
	if _, err := s.AgentUpdate(ctx, def("t1", "late", "key:a"), nil); !errors.Is(err, agentd.ErrAgentNotFound) {
		t.Fatalf("update of a deleted agent: %v", err)
	}
	back, err := s.AgentCreate(ctx, def("t1", "back", "key:e"), nil)
	if err != nil || back.Version != 10 {
		t.Fatalf("made again: %+v %v", back, err)
	}
	if old, err := s.AgentGet(ctx, "t1", "helper", 1); err != nil || string(old.Definition) != `{"instructions": "one"}` {
		t.Fatalf("version 1 after it was made again: %+v %v", old, err)
	}
	if other, err := s.AgentGet(ctx, "t2", "helper", 0); err != nil || other.Version != 1 {
		t.Fatalf("t2's agent after t1's delete: %+v %v", other, err)
	}
}

// TestTenantTools: a tenant's tool is made once per name (another tenant's
// of that name is its own), replaced with its creation kept, listed by
// name, and deleted.
func TestTenantTools(t *testing.T) {
	t.Parallel()
	s := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t)})
	ctx := context.Background()
	row := agentd.TenantTool{TenantID: "t1", Name: "crm", Config: []byte(`{"url":"https://x.example"}`), HeaderNames: []string{"Authorization"},
		SealedHeaders: "v1:abc", Actor: "key:a"}
	made, err := s.TenantToolCreate(ctx, row)
	if err != nil || made.SealedHeaders != "v1:abc" || !slices.Equal(made.HeaderNames, []string{"Authorization"}) {
		t.Fatalf("create: %+v %v", made, err)
	}
	if _, err := s.TenantToolCreate(ctx, row); !errors.Is(err, agentd.ErrToolExists) {
		t.Fatalf("created twice: %v", err)
	}
	other := row
	other.TenantID = "t2"
	if _, err := s.TenantToolCreate(ctx, other); err != nil {
		t.Fatalf("another tenant's: %v", err)
	}
	row.Config, row.HeaderNames, row.SealedHeaders = []byte(`{"url":"https://y.example"}`), nil, ""
	again, err := s.TenantToolReplace(ctx, row)
	if err != nil || again.SealedHeaders != "" || len(again.HeaderNames) != 0 || !again.CreatedAt.Equal(made.CreatedAt) ||
		string(again.Config) != `{"url": "https://y.example"}` {
		t.Fatalf("replace: %+v %s %v", again, again.Config, err)
	}
	if list, err := s.TenantTools(ctx, "t1"); err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.TenantToolDelete(ctx, "t1", agentd.ToolKindWebhook, "crm"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TenantToolGet(ctx, "t1", agentd.ToolKindWebhook, "crm"); !errors.Is(err, agentd.ErrToolNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := s.TenantToolReplace(ctx, row); !errors.Is(err, agentd.ErrToolNotFound) {
		t.Fatalf("replace after delete: %v", err)
	}
	if got, err := s.TenantToolGet(ctx, "t2", agentd.ToolKindWebhook, "crm"); err != nil || got.TenantID != "t2" {
		t.Fatalf("t2's after t1's delete: %+v %v", got, err)
	}
}
