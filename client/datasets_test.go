package client_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestDatasets: against a real server, a dataset is made with input cases
// (text, and messages with an image), a case is captured from a run that
// called a tool, another is removed; versions read the cases they held,
// a page at a time; the SDK's types are the API's answers, key for key; a
// case read back and sent again is kept as it is; taken ids, unknown
// datasets and bad fields are errors with their codes; a deleted dataset
// is gone.
func TestDatasets(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	base := "http://" + addr
	ctx := context.Background()
	c := client.New(base)
	ds := c.Datasets()

	src, err := c.CreateRun(ctx, client.CreateRun{Input: "/call clock {}\n/say It is late.", Variables: map[string]string{"who": "Ann"}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.WaitRun(ctx, src.ID, 10*time.Second); err != nil || r.Status != agentd.StatusCompleted {
		t.Fatalf("the source run: %+v %v", r, err)
	}
	v1, err := ds.Create(ctx, client.NewDataset{Name: "smoke", Description: "basics", Cases: []client.NewCase{
		{ID: "greet", Input: "hello", Checks: []client.Check{{Type: agentd.CheckContains, Value: "hi"}}},
		{ID: "look", InputMessages: []client.InputMessage{{Role: agentd.RoleUser, Content: "what is this?",
			Parts: []client.InputPart{client.ImageData("image/png", onePixelPNG(t))}}}, User: "u1",
			Stubs: []client.Stub{{Tool: "clock", Result: json.RawMessage(`"noon"`)}}},
	}})
	if err != nil || v1.Version != 1 || v1.CaseCount != 2 {
		t.Fatalf("create: %+v %v", v1, err)
	}
	one := 1
	v2, err := ds.AddCases(ctx, "smoke", client.NewCase{ID: "late", FromRun: src.ID, AtStep: &one,
		Checks: []client.Check{{Type: agentd.CheckCalled, Tool: "clock"}}})
	if err != nil || v2.Version != 2 || !slices.Equal(v2.ChangedCases, []string{"late"}) {
		t.Fatalf("add from a run: %+v %v", v2, err)
	}
	v3, err := ds.RemoveCase(ctx, "smoke", "greet")
	if err != nil || v3.Version != 3 || v3.CaseCount != 2 {
		t.Fatalf("remove: %+v %v", v3, err)
	}

	got := sameShape[client.Dataset](t, base, "/datasets/smoke/versions/2")
	if got.Version != 2 || got.LatestVersion != 3 || got.CaseCount != 3 || got.Change != agentd.DatasetCasesAdded {
		t.Fatalf("version 2: %+v", got)
	}
	page := sameShape[client.Page[client.Case]](t, base, "/datasets/smoke/cases?version=2&limit=2")
	if len(page.Data) != 2 || !page.HasMore || page.Data[0].ID != "greet" {
		t.Fatalf("version 2's first page: %+v", page)
	}
	next, err := ds.Cases(ctx, "smoke", 2, 2, *page.NextCursor)
	if err != nil || len(next.Data) != 1 || next.HasMore {
		t.Fatalf("version 2's second page: %+v %v", next, err)
	}
	late := next.Data[0]
	if late.Kind != agentd.CaseFromRun || *late.FromRun != src.ID || late.Variables["who"] != "Ann" || late.Recorded == nil ||
		len(late.Recorded.Messages) != 3 || late.Recorded.Messages[1].ToolCalls[0].Name != "clock" || late.Recorded.Model != "fake" {
		t.Fatalf("the captured case: %+v", late)
	}
	latest, err := ds.Cases(ctx, "smoke", 0, 0, "")
	if err != nil || len(latest.Data) != 2 || latest.Data[0].ID != "look" || *latest.Data[0].User != "u1" ||
		!strings.Contains(string(latest.Data[0].Input), "data:image/png;base64,") {
		t.Fatalf("the latest version's cases: %+v %v", latest, err)
	}

	// A case read back and sent again, under another id, is kept as it is.
	var resent map[string]any
	b, _ := json.Marshal(late)
	if err := json.Unmarshal(b, &resent); err != nil {
		t.Fatal(err)
	}
	resent["id"] = "late-copy"
	b, _ = json.Marshal(resent)
	if _, err := ds.AddCasesJSON(ctx, "smoke", []json.RawMessage{b}); err != nil {
		t.Fatal(err)
	}
	copies, err := ds.Cases(ctx, "smoke", 0, 10, "")
	if err != nil || len(copies.Data) != 3 {
		t.Fatalf("after the copy: %+v %v", copies, err)
	}
	cp := copies.Data[2]
	if cp.ID != "late-copy" || !jsonEqual(mustJSON(t, cp.Recorded), mustJSON(t, late.Recorded)) || *cp.FromRun != src.ID {
		t.Fatalf("the copy: %+v", cp)
	}

	if _, err := ds.AddCases(ctx, "smoke", client.NewCase{ID: "look", Input: "again"}); !client.IsCode(err, "dataset_case_exists") {
		t.Fatalf("a taken id: %v", err)
	}
	if _, err := ds.AddCases(ctx, "nope", client.NewCase{Input: "x"}); !client.IsCode(err, "dataset_not_found") {
		t.Fatalf("an unknown dataset: %v", err)
	}
	if _, err := ds.AddCases(ctx, "smoke", client.NewCase{Input: "x", Checks: []client.Check{{Type: "vibes"}}}); !fieldIs(err, "cases[0].checks[0].type") {
		t.Fatalf("a bad check: %v", err)
	}
	if list, err := ds.List(ctx, 0, ""); err != nil || len(list.Data) != 1 || list.Data[0].Name != "smoke" || list.Data[0].Version != 4 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := ds.Delete(ctx, "smoke"); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.Get(ctx, "smoke", 0); !client.IsCode(err, "dataset_not_found") {
		t.Fatalf("after the delete: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
