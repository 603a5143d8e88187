package persist_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestDatasetChangesAtOnce: changes of a dataset made at once each make a
// version of their own, in order, and none passes the bound of cases a
// version holds; a case removed at once by several is removed by one; each
// version reads the cases it had; another tenant's dataset of the same
// name is its own.
func TestDatasetChangesAtOnce(t *testing.T) {
	t.Parallel()
	s := persisttest.Open(t, persist.Config{URL: persisttest.NewDatabase(t)})
	ctx := context.Background()
	input := func(id string) agentd.DatasetCase {
		return agentd.DatasetCase{ID: id, Input: []byte(`"` + id + `"`)}
	}
	if _, err := s.DatasetCreate(ctx, agentd.DatasetDefine{TenantID: "t1", Name: "d", Actor: "key:a",
		Cases: []agentd.DatasetCase{input("first")}}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.DatasetCreate(ctx, agentd.DatasetDefine{TenantID: "t2", Name: "d", Actor: "key:b"}); err != nil || d.Version != 1 || d.CaseCount != 0 {
		t.Fatalf("another tenant's: %+v %v", d, err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var versions []int
	limited := 0
	for i := range 16 {
		wg.Go(func() {
			d, err := s.DatasetCasesAdd(ctx, agentd.CasesAdd{TenantID: "t1", Name: "d", Actor: "key:a", MaxCases: 10,
				Cases: []agentd.DatasetCase{input(fmt.Sprintf("c%02d", i))}})
			mu.Lock()
			defer mu.Unlock()
			var limit *agentd.DatasetLimitError
			switch {
			case errors.As(err, &limit) && limit.Limit == agentd.LimitCasesPerDataset:
				limited++
			case err != nil:
				t.Error(err)
			default:
				versions = append(versions, d.Version)
			}
		})
	}
	wg.Wait()
	slices.Sort(versions)
	if !slices.Equal(versions, []int{2, 3, 4, 5, 6, 7, 8, 9, 10}) || limited != 7 {
		t.Fatalf("adds at once made versions %v, %d refused", versions, limited)
	}
	removed := 0
	for range 4 {
		wg.Go(func() {
			_, err := s.DatasetCaseRemove(ctx, "t1", "d", "first", "key:a")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				removed++
			case !errors.Is(err, agentd.ErrCaseNotFound):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	latest, err := s.DatasetGet(ctx, "t1", "d", 0)
	if removed != 1 || err != nil || latest.Version != 11 || latest.CaseCount != 9 || latest.Change != agentd.DatasetCaseRemoved {
		t.Fatalf("removed %d times; latest %+v %v", removed, latest, err)
	}
	for version, want := range map[int]int{1: 1, 5: 5, 10: 10, 11: 9} {
		cases, err := s.DatasetCases(ctx, "t1", "d", version, 0, 100)
		if err != nil || len(cases) != want {
			t.Errorf("version %d holds %d cases (%v), want %d", version, len(cases), err, want)
		}
	}
	if cases, err := s.DatasetCases(ctx, "t2", "d", 0, 0, 100); err != nil || len(cases) != 0 {
		t.Fatalf("the other tenant's dataset: %+v %v", cases, err)
	}
}
