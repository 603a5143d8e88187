package stream

import (
	"strings"
	"testing"

	"github.com/agentd/agentd"
)

// evs returns events from..to with size bytes of data each.
func evs(from, to int64, size int) []agentd.Event {
	var out []agentd.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, agentd.Event{Seq: seq, Data: []byte(strings.Repeat("x", size))})
	}
	return out
}

func span(r *recent) [2]int64 {
	if len(r.events) == 0 {
		return [2]int64{}
	}
	return [2]int64{r.lo(), r.hi()}
}

func TestRecentMerge(t *testing.T) {
	cases := []struct {
		name  string
		held  [2]int64 // empty: none
		merge [2]int64
		want  [2]int64
	}{
		{"into nothing", [2]int64{}, [2]int64{3, 5}, [2]int64{3, 5}},
		{"extends the end", [2]int64{1, 5}, [2]int64{6, 8}, [2]int64{1, 8}},
		{"overlaps the end", [2]int64{1, 5}, [2]int64{4, 8}, [2]int64{1, 8}},
		{"extends the front", [2]int64{5, 8}, [2]int64{1, 4}, [2]int64{1, 8}},
		{"overlaps the front", [2]int64{5, 8}, [2]int64{2, 6}, [2]int64{2, 8}},
		{"holds them", [2]int64{5, 8}, [2]int64{1, 10}, [2]int64{1, 10}},
		{"within", [2]int64{1, 8}, [2]int64{3, 4}, [2]int64{1, 8}},
		{"newer, with a gap", [2]int64{1, 5}, [2]int64{9, 10}, [2]int64{9, 10}},
		{"older, with a gap", [2]int64{9, 10}, [2]int64{1, 5}, [2]int64{9, 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recent{told: -1, shared: true}
			if c.held != ([2]int64{}) {
				r.merge(evs(c.held[0], c.held[1], 10))
			}
			r.merge(evs(c.merge[0], c.merge[1], 10))
			if got := span(r); got != c.want {
				t.Fatalf("holds %v, want %v", got, c.want)
			}
			for i, ev := range r.events {
				if ev.Seq != r.lo()+int64(i) {
					t.Fatalf("not contiguous: %v", r.events)
				}
			}
			if r.bytes != 10*len(r.events) {
				t.Fatalf("bytes %d for %d events", r.bytes, len(r.events))
			}
		})
	}
}

func TestRecentKeepsTheNewestWithinItsCap(t *testing.T) {
	r := &recent{told: -1, shared: true}
	const size = 1000
	r.merge(evs(1, 100, size)) // 100,000 bytes: over the cap
	if r.bytes > recentBytes/2 || r.hi() != 100 {
		t.Fatalf("holds %v, %d bytes; want the newest within %d", span(r), r.bytes, recentBytes/2)
	}
	handed, _, _ := r.held(r.lo()-1, 1000)
	lo := r.lo()
	r.merge(evs(101, 200, size))
	if r.hi() != 200 || r.bytes > recentBytes/2 {
		t.Fatalf("holds %v, %d bytes", span(r), r.bytes)
	}
	// What was handed out is unchanged by later merges.
	for i, ev := range handed {
		if ev.Seq != lo+int64(i) {
			t.Fatalf("handed-out event %d became seq %d", i, ev.Seq)
		}
	}
	// One event larger than the cap is still held: the feed's latest.
	r.merge(evs(201, 201, 2*recentBytes))
	if span(r) != [2]int64{201, 201} {
		t.Fatalf("holds %v", span(r))
	}
}

func TestRecentHeld(t *testing.T) {
	r := &recent{told: -1, shared: true}
	if _, ok, _ := r.held(0, 10); ok {
		t.Fatal("answered before the feed told or held anything")
	}
	r.add(nil, 4) // the feed's position: events up to 4 exist, none held
	if _, ok, _ := r.held(0, 10); ok {
		t.Fatal("answered for events it does not hold")
	}
	if got, ok, more := r.held(4, 10); !ok || len(got) != 0 || more {
		t.Fatalf("after everything told: %v %v %v; want nothing more", got, ok, more)
	}
	r.merge(evs(1, 3, 10)) // a replay read while 4 was not committed yet
	got, ok, more := r.held(0, 10)
	if !ok || len(got) != 3 || !more {
		t.Fatalf("held 1-3 of 4 told: %d events, ok %v, more %v; want 3 and ask again", len(got), ok, more)
	}
	if _, ok, _ := r.held(3, 10); ok {
		t.Fatal("answered for 4, which it neither holds nor is past")
	}
	r.add(evs(4, 6, 10), 6)
	if got, ok, more := r.held(0, 2); !ok || len(got) != 2 || got[0].Seq != 1 || !more {
		t.Fatalf("a page of 2: %v %v %v", got, ok, more)
	}
	if got, ok, more := r.held(2, 10); !ok || len(got) != 4 || got[0].Seq != 3 || more {
		t.Fatalf("after 2: %v %v %v; want 3-6 and done", got, ok, more)
	}
	if got, ok, more := r.held(9, 10); !ok || len(got) != 0 || more {
		t.Fatalf("past everything: %v %v %v", got, ok, more)
	}
}

func TestRecentKeepsNothingForOneSubscriber(t *testing.T) {
	r := &recent{told: -1}
	r.add(evs(1, 5, 10), 5)
	if len(r.events) != 0 {
		t.Fatalf("kept %v for a feed with one subscriber", span(r))
	}
	if _, ok, _ := r.held(5, 10); !ok {
		t.Fatal("a stream at the feed's position must still be answered")
	}
	r.share(true)
	r.add(evs(6, 8, 10), 8)
	if span(r) != [2]int64{6, 8} {
		t.Fatalf("shared feed holds %v, want 6-8", span(r))
	}
	r.share(false)
	if len(r.events) != 0 || r.bytes != 0 {
		t.Fatalf("kept %v after going back to one subscriber", span(r))
	}
}
