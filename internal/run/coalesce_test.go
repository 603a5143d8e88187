package run

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// gateStore is an execStore whose Exec records the delta texts it commits,
// and holds the commits after the first until the gate opens.
type gateStore struct {
	execStore
	gate    chan struct{}
	entered chan struct{} // a held commit began

	mu    sync.Mutex
	texts []string
}

func (g *gateStore) Exec(ctx context.Context, f persist.Fence, evs []agentd.EventIn, ops ...persist.Op) (int64, error) {
	g.mu.Lock()
	first := len(g.texts) == 0
	g.mu.Unlock()
	if !first {
		g.entered <- struct{}{}
		<-g.gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range evs {
		g.texts = append(g.texts, e.Data.(agentd.MessageDeltaData).Text)
	}
	return int64(len(g.texts)), nil
}

// TestCoalescerDoesNotHoldTheStreamDuringACommit: while a commit of deltas
// is under way (held here by the store), text from the model's stream is
// still taken at once, and is committed after it, in order.
func TestCoalescerDoesNotHoldTheStreamDuringACommit(t *testing.T) {
	g := &gateStore{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	x := &execution{d: &deps{store: g, m: NewMetrics(nil), log: slog.New(slog.DiscardHandler)}, ctx: context.Background()}
	c := newCoalescer(x, 1, 5*time.Millisecond, 1<<20, false)
	c.add("a") // the first delta goes out at once
	// Due after the window: the timer commits it, and is held; on a machine
	// slow enough that the window passed already, add commits it itself,
	// and is held: either way a commit is under way, which is the case
	// under test. (In a goroutine: a held add must not hold the test.)
	heldAdd := make(chan struct{})
	go func() {
		c.add("b")
		close(heldAdd)
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the window's commit did not start")
	}
	added := make(chan struct{})
	go func() {
		c.add("c")
		c.add("d")
		close(added)
	}()
	select {
	case <-added:
	case <-time.After(10 * time.Second):
		t.Fatal("adding text waited for the commit under way")
	}
	close(g.gate)
	<-heldAdd
	c.stop()
	committed := strings.Join(g.texts, "")
	if got := committed + c.pending(); got != "abcd" {
		t.Fatalf("committed %q and pending %q: the text is %q, want abcd", g.texts, c.pending(), got)
	}
	if g.texts[0] != "a" || g.texts[1] != "b" {
		t.Fatalf("committed %q: want a, then b", g.texts)
	}
}
