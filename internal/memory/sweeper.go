package memory

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/lifecycle"
)

// RetentionStore runs memory's retention passes (*persist.Store).
type RetentionStore interface {
	// MemoryRetentionPass removes the versions past r (never an item's
	// current one) and the items that expired, and says how many versions
	// it removed.
	MemoryRetentionPass(ctx context.Context, r agentd.MemoryRetention) (int, error)
}

// Sweeper runs a retention pass of memory every interval: old versions
// past retention, and expired items, go. Every instance runs one; passes
// of two instances at once remove each row once.
type Sweeper struct {
	*lifecycle.Periodic
}

// NewSweeper returns a sweeper of store's memory, not yet started.
func NewSweeper(store RetentionStore, keep agentd.MemoryRetention, interval time.Duration, log *slog.Logger) *Sweeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sweeper{lifecycle.NewPeriodic("memory retention pass", interval, func(ctx context.Context) {
		start := time.Now()
		n, err := store.MemoryRetentionPass(ctx, keep)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Warn("memory retention pass", "error", err)
		case n > 0:
			log.Info("memory retention pass", "versions", n, "took", time.Since(start).Round(time.Millisecond))
		}
	})}
}
