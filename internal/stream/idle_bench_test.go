package stream_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/stream"
)

// queryCounter counts the Hub's database calls, each one transaction.
type queryCounter struct {
	*persist.Store
	n atomic.Int64
}

func (c *queryCounter) EventsAfter(ctx context.Context, runID string, after int64, limit int) ([]agentd.Event, error) {
	c.n.Add(1)
	return c.Store.EventsAfter(ctx, runID, after, limit)
}

func (c *queryCounter) RunHead(ctx context.Context, id string) (agentd.RunHead, error) {
	c.n.Add(1)
	return c.Store.RunHead(ctx, id)
}

func (c *queryCounter) RunHeads(ctx context.Context, ids []string) ([]agentd.RunHead, error) {
	c.n.Add(1)
	return c.Store.RunHeads(ctx, ids)
}

// BenchmarkIdleStreams reports the database transactions a second that
// 1,000 idle streams, one per run, cost an instance with the default poll
// and heartbeat intervals (the Hub's queries; each is one transaction):
//
//	go test -run '^$' -bench IdleStreams -benchtime 1x ./internal/stream
func BenchmarkIdleStreams(b *testing.B) {
	const streams = 1000
	const measure = 20 * time.Second
	store := persisttest.Open(b, persist.Config{URL: persisttest.NewDatabase(b), MaxConns: 40})
	counter := &queryCounter{Store: store}
	hub := stream.New(stream.Config{})
	inst := newInstance(b, hub, counter, nil)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	for range streams {
		f := newRun(b, store)
		resp, err := hc.Get(inst.srv.URL + "/runs/" + f.RunID + "/events")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { resp.Body.Close() })
	}
	for hub.SubscriberCount() < streams {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // every feed has positioned itself
	b.ResetTimer()
	for range b.N {
		before := counter.n.Load()
		time.Sleep(measure)
		b.ReportMetric(float64(counter.n.Load()-before)/measure.Seconds(), "tx/s")
	}
}
