package stream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentd/agentd/internal/stream"
)

// TestHubStartStop: a Hub stops safely before it starts and twice, does
// not start without a store, and does not start again once stopped.
func TestHubStartStop(t *testing.T) {
	ctx := context.Background()
	hub := stream.New(stream.Config{})
	if err := hub.Start(ctx); err == nil {
		t.Fatal("a hub with no store bound started")
	}
	for range 2 {
		if err := hub.Stop(ctx); err != nil {
			t.Fatalf("stop before start: %v", err)
		}
	}
	if err := hub.Start(ctx); !errors.Is(err, stream.ErrStopped) {
		t.Fatalf("start after stop: %v, want ErrStopped", err)
	}
}
