package api

import "sync"

// knownRunsMax caps the runs knownRuns remembers (about 100 bytes each).
const knownRunsMax = 16384

// knownRuns remembers runs found to exist, with their tenant, so that the
// many event streams of one run do not each read the run to check who asks:
// a run's tenant never changes. A deleted run's entry may stay: the Hub
// refuses its streams (stream.Hub.Forget), so a stale entry costs nothing
// but memory. Misses are not remembered.
type knownRuns struct {
	mu sync.Mutex
	m  map[knownRun]struct{}
}

type knownRun struct{ tenant, id string }

func (k *knownRuns) has(tenant, id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.m[knownRun{tenant, id}]
	return ok
}

// add remembers a run; when full, it forgets an arbitrary other one.
func (k *knownRuns) add(tenant, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = make(map[knownRun]struct{})
	}
	if len(k.m) >= knownRunsMax {
		for old := range k.m {
			delete(k.m, old)
			break
		}
	}
	k.m[knownRun{tenant, id}] = struct{}{}
}
