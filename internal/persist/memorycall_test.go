package persist_test

import (
	"context"
	"sync"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestMemoryWriteOncePerCall: a memory tool's write or delete made again
// under the same tool call (a retry, a recovery, two at once) finds the
// version its call wrote and writes none: one version per call, and the
// tenant's counters moved once.
func TestMemoryWriteOncePerCall(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	w := agentd.MemoryWrite{Namespace: ns("users/ann"), Key: "color", Value: "blue", Source: agentd.MemoryFromAgent,
		RunID: agentd.NewID(), Step: 1, ToolCallID: agentd.NewID()}
	var wg sync.WaitGroup
	got := make([]agentd.MemoryItem, 4)
	for i := range got {
		wg.Go(func() {
			it, err := s.MemoryPut(ctx, "t1", w)
			if err != nil {
				t.Errorf("put %d: %v", i, err)
			}
			got[i] = it
		})
	}
	wg.Wait()
	for _, it := range got {
		if it.Version != 1 || it.ToolCallID != w.ToolCallID || it.Value != "blue" {
			t.Fatalf("a write of the call: %+v", it)
		}
	}
	// Another call writes the next version; the first call's again still
	// answers its own.
	w2 := w
	w2.Value, w2.ToolCallID = "green", agentd.NewID()
	if it := put(t, s, "t1", w2); it.Version != 2 {
		t.Fatalf("the next call's write: %+v", it)
	}
	if it := put(t, s, "t1", w); it.Version != 1 || it.Value != "blue" {
		t.Fatalf("the first call's write made again: %+v", it)
	}
	del := agentd.MemoryDeleteParams{Namespace: w.Namespace, Key: w.Key, Source: agentd.MemoryFromAgent, RunID: w.RunID,
		ToolCallID: agentd.NewID()}
	for range 2 {
		it, err := s.MemoryDelete(ctx, "t1", del)
		if err != nil || it.Version != 3 || !it.Deleted {
			t.Fatalf("the delete's call: %+v %v", it, err)
		}
	}
	vs, err := s.MemoryVersions(ctx, "t1", w.Namespace, w.Key, agentd.MemoryRead{})
	if err != nil || len(vs) != 3 {
		t.Fatalf("versions: %d %v", len(vs), err)
	}
	if u := usage(t, s, "t1"); u.Items != 0 || u.Bytes != int64(2*w.Bytes()-len(w.Value)+len(w2.Value)+len(w.Key)) {
		t.Fatalf("usage %+v", u)
	}
	// The same call id under another tenant is another call.
	if it := put(t, s, "t2", w); it.Version != 1 {
		t.Fatalf("another tenant's write: %+v", it)
	}
}
