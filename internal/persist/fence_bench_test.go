package persist_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// BenchmarkFencedDelta times the executor's most frequent write, one
// streamed delta under its run's fence, committed alone.
func BenchmarkFencedDelta(b *testing.B) {
	s, _ := persisttest.New(b)
	ctx := context.Background()
	if _, _, err := s.RunCreate(ctx, persist.RunCreateParams{TenantID: "default", Model: "m",
		Input: []agentd.InputMessage{{Role: "user", Content: "hi"}}}); err != nil {
		b.Fatal(err)
	}
	c, err := s.RunClaim(ctx, "w", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	f := persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: "w"}
	delta := []agentd.EventIn{agentd.EventOf(1, agentd.MessageDeltaData{Text: "some streamed text"})}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Exec(ctx, f, delta); err != nil {
			b.Fatal(err)
		}
	}
}
