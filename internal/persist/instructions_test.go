package persist_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestInstructionsVersions: a tenant's managed instructions take the next
// version at each change, a delete included, so that a version never
// names two texts; one tenant's are not another's.
func TestInstructionsVersions(t *testing.T) {
	t.Parallel()
	s, _ := persisttest.New(t)
	ctx := context.Background()
	m, err := s.InstructionsGet(ctx, "a")
	if err != nil || m.Version != 0 || m.Text != "" || m.TenantID != "a" {
		t.Fatalf("before any: %+v %v", m, err)
	}
	for i, text := range []string{"Never touch production.", "Answer in French."} {
		m, err := s.InstructionsPut(ctx, "a", text, "key:x")
		if err != nil || m.Version != i+1 || m.Text != text || m.UpdatedBy != "key:x" || m.UpdatedAt.IsZero() {
			t.Fatalf("put %d: %+v %v", i, m, err)
		}
	}
	if m, err := s.InstructionsGet(ctx, "b"); err != nil || m.Version != 0 || m.Text != "" {
		t.Fatalf("tenant b reads %+v %v", m, err)
	}
	if _, err := s.InstructionsPut(ctx, "a", "", ""); !errors.Is(err, persist.ErrInvalidValue) {
		t.Fatalf("empty instructions: %v", err)
	}
	for range 2 { // a second delete changes nothing
		if err := s.InstructionsDelete(ctx, "a", "key:y"); err != nil {
			t.Fatal(err)
		}
		if m, err := s.InstructionsGet(ctx, "a"); err != nil || m.Version != 3 || m.Text != "" || m.UpdatedBy != "key:y" {
			t.Fatalf("deleted: %+v %v", m, err)
		}
	}
	if m, err := s.InstructionsPut(ctx, "a", "Again.", ""); err != nil || m.Version != 4 || m.UpdatedBy != "" {
		t.Fatalf("put after a delete: %+v %v", m, err)
	}
}
