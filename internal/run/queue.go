package run

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// The engine's queue: the runs this instance created queued, because every
// worker was busy or others were queued before them. A worker that finishes
// a run takes the next of them by its id (Store.RunClaimStartID: a few
// index probes), in the order they were accepted, before it frees its slot;
// and while any wait, a new run is queued behind them rather than claimed
// at its creation, so that runs start in the order they came. Between
// tenants the queue is fair as the claim is: the next run is the oldest of
// the tenant with the fewest runs executing here, tenants with as many
// taking turns.
//
// The queue is this instance's knowledge, not the truth: a run in it may
// have been claimed by another instance, cancelled, or be behind another
// run of its conversation (if_busy: enqueue). Its claim then finds nothing
// and the run leaves the queue, parked until a run of its conversation
// ends here, when it goes back once; the database's queue, which every
// instance's dispatcher searches, still has whatever was not claimed.

// maxQueued bounds the runs the queue remembers; past it, runs queued are
// left to the dispatcher's search, which also takes the oldest first.
const maxQueued = 10000

// queuedRun is a run in the engine's queue, with its conversation, the
// state its creation knew when that is the whole state (a run of a new
// conversation), and whether it was parked once already.
type queuedRun struct {
	id, tenant, conversation string
	known                    *agentd.RunState
	unparked                 bool
}

// maxParked bounds the runs parked behind their conversation's run.
const maxParked = 1000

// tenantQueue is one tenant's queued runs, oldest first, and when the queue
// last gave one of them a worker (a count of hand-offs; 0: not yet).
type tenantQueue struct {
	runs   []queuedRun
	served uint64
}

// enqueueLocked remembers run, just created queued for this instance's
// queue (RunCreateParams.QueuedBy): create asks for that only while the
// queue holds fewer than maxQueued runs. Called with e.mu held.
func (e *Engine) enqueueLocked(run agentd.Run, known *agentd.RunState) {
	e.insertLocked(queuedRun{id: run.ID, tenant: run.TenantID, conversation: run.ConversationID, known: known})
}

// insertLocked puts r in its tenant's queue, in its place: runs are
// accepted in the order of their ids (UUIDv7), and commits may finish out
// of that order. Called with e.mu held.
func (e *Engine) insertLocked(r queuedRun) {
	q := e.queues[r.tenant]
	if q == nil {
		q = &tenantQueue{}
		e.queues[r.tenant] = q
	}
	i := len(q.runs)
	for i > 0 && q.runs[i-1].id > r.id {
		i--
	}
	q.runs = append(q.runs, queuedRun{})
	copy(q.runs[i+1:], q.runs[i:])
	q.runs[i] = r
	e.queued++
}

// parkLocked keeps r, which its claim did not find claimable, until a run
// of its conversation ends here: it may be waiting behind that run (if_busy
// enqueue). A run is parked once. Called with e.mu held.
func (e *Engine) parkLocked(r queuedRun) {
	if r.unparked || r.conversation == "" || e.nparked >= maxParked {
		return
	}
	e.parked[r.conversation] = append(e.parked[r.conversation], r)
	e.nparked++
}

// unpark returns to the queue the runs parked behind conversation, whose
// run here has just ended, so that the worker it leaves claims the next.
func (e *Engine) unpark(conversation string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.parked[conversation] {
		r.unparked = true
		e.insertLocked(r)
		e.nparked--
	}
	delete(e.parked, conversation)
}

// popLocked takes the next run of the queue: the oldest run of the tenant
// with the fewest runs executing here, and of those the tenant served least
// recently, so that tenants with as many runs executing take turns. Called
// with e.mu held.
func (e *Engine) popLocked() (queuedRun, bool) {
	var best string
	var q *tenantQueue
	for tenant, t := range e.queues {
		if q != nil {
			nb, nt := e.executing[best], e.executing[tenant]
			if nt > nb || (nt == nb && (t.served > q.served || (t.served == q.served && t.runs[0].id > q.runs[0].id))) {
				continue
			}
		}
		best, q = tenant, t
	}
	if q == nil {
		return queuedRun{}, false
	}
	e.handoffs++
	q.served = e.handoffs
	r := q.runs[0]
	q.runs[0] = queuedRun{}
	q.runs = q.runs[1:]
	if len(q.runs) == 0 {
		delete(e.queues, best)
	}
	e.queued--
	return r, true
}

// claimQueued claims the next run of the queue that is still claimable and
// launches it in the worker slot its caller holds. It reports false (the
// slot is still the caller's) when the queue has nothing claimable or the
// engine stops claiming.
func (e *Engine) claimQueued() bool {
	for e.claiming.Err() == nil {
		e.mu.Lock()
		r, ok := e.popLocked()
		e.mu.Unlock()
		if !ok {
			return false
		}
		ctx, cancel := context.WithTimeout(e.claiming, 5*time.Second)
		c, err := e.cfg.Store.RunClaimStartID(ctx, e.cfg.WorkerID, e.cfg.LeaseTTL, r.id)
		cancel()
		switch {
		case errors.Is(err, agentd.ErrNotFound):
			// Claimed elsewhere or cancelled; or it waits for its
			// conversation or its tenant's cap: it is parked until a run
			// of its conversation ends here, and the dispatcher's next
			// search (now, or after its poll) looks for it too.
			e.m.claim(claimQueuedGone)
			e.mu.Lock()
			e.parkLocked(r)
			e.mu.Unlock()
			e.Wake()
			continue
		case err != nil:
			if e.claiming.Err() == nil {
				e.m.claim(claimError)
				e.log.Error("claim queued run", "run_id", r.id, "error", err)
				e.Wake() // the dispatcher's search finds it later
			}
			return false
		}
		e.m.claim(claimQueued)
		if !e.launch(c, knownAfter(r, c), true) {
			e.handBack(c.Run)
			return false
		}
		return true
	}
	return false
}

// takeNext is the claim of the next run of the queue that the stop of
// run c, executing here, carries in its transaction (persist.ClaimNext),
// so that the worker it leaves starts the next run without a transaction
// of its own for the claim; nil when the queue has nothing, runs wait
// for c's conversation (they go first, from the queue, once it stopped),
// or the engine stops claiming. The next run is chosen as if c had
// stopped: its tenant counts one run less.
func (e *Engine) takeNext(c persist.Claim) *persist.ClaimNext {
	if e.claiming.Err() != nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.parked[c.ConversationID]) > 0 {
		return nil
	}
	e.executing[c.TenantID]--
	r, ok := e.popLocked()
	e.executing[c.TenantID]++
	if !ok {
		return nil
	}
	e.handed[r.id] = r
	return e.cfg.Store.ClaimNext(r.id, e.cfg.WorkerID, e.cfg.LeaseTTL)
}

// launchHanded launches the run that the stop of a run claimed with next,
// in the slot that run leaves, as claimQueued does; it reports false (the
// slot is still the caller's) when the stop did not claim it (it goes back
// to the queue, whose next claim will try it as any) or the engine stops.
func (e *Engine) launchHanded(next *persist.ClaimNext) bool {
	e.mu.Lock()
	r := e.handed[next.ID()]
	delete(e.handed, next.ID())
	c, claimed := next.Claimed()
	if !claimed {
		e.insertLocked(r)
		e.mu.Unlock()
		return false
	}
	e.mu.Unlock()
	e.m.claim(claimHanded)
	if !e.launch(c, knownAfter(r, c), true) {
		e.handBack(c.Run)
		return false
	}
	return true
}

// knownAfter is the state of run r, just claimed by c, when its creation
// knew the whole of it (a run of a new conversation); nil: the execution
// reads it.
func knownAfter(r queuedRun, c persist.Claim) *agentd.RunState {
	if r.known == nil || c.StartedStep == "" {
		return nil
	}
	// The claim changed the run and started its first step; the rest of a
	// new conversation's run is as its creation left it.
	known := *r.known
	known.Run = c.Run
	known.Steps = []agentd.Step{agentd.FirstStep(c.ID, c.StartedStep, time.Now())}
	return &known
}

// handBack releases the lease of a run claimed while the engine began
// stopping, so that a peer takes it over at once.
func (e *Engine) handBack(run agentd.Run) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 5*time.Second)
	defer cancel()
	if err := e.cfg.Store.LeaseRelease(ctx, persist.Fence{RunID: run.ID, Epoch: run.Epoch, Worker: e.cfg.WorkerID}); err != nil {
		e.log.Warn("hand back a run claimed while stopping", "run_id", run.ID, "error", err)
	}
}
