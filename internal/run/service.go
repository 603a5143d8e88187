package run

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// Service is the engine's one door for commands: every change that a client
// asks of a run (create it, cancel it, resume it, answer what it waits for,
// or say that its stream's client went away) goes through it. Reads do not:
// they go to the store.
type Service struct {
	e *Engine
}

// Service returns the engine's command door. It may be used before Start
// (a run created then is queued for whichever instance claims it) and after
// Stop.
func (e *Engine) Service() *Service { return &Service{e: e} }

// Create commits a new run, its conversation when new, and its input, and
// starts it on a free worker of this instance when it can start at once. A
// repeated idempotency key returns the first run and created false. Errors:
// a *agentd.BusyError (the conversation has a run in flight and if_busy is
// reject), agentd.ErrIdempotencyMismatch, agentd.ErrConversationNotFound,
// agentd.ErrQuotaExceeded.
func (s *Service) Create(ctx context.Context, c agentd.RunCreate) (run agentd.Run, created bool, err error) {
	return s.e.create(ctx, persist.CreateOf(c))
}

// Cancel asks a run to stop, on whichever instance executes it; actor is
// who asks (recorded on the run and in its end event).
// Errors: persist.ErrRunNotFound, persist.ErrRunFinished.
func (s *Service) Cancel(ctx context.Context, tenantID, id, actor string) (agentd.Run, error) {
	return s.e.cfg.Store.RunCancel(ctx, tenantID, id, actor)
}

// Resume queues again a run that is interrupted, failed, timed out or
// cancelled; it continues from its last committed step. actor is who asks
// (recorded on the run and in its run.resumed event).
// Errors: persist.ErrRunNotFound, persist.ErrRunCompleted.
func (s *Service) Resume(ctx context.Context, tenantID, id, actor string) (agentd.Run, error) {
	return s.e.cfg.Store.RunResume(ctx, tenantID, id, actor)
}

// ResolveAction records a client's decision on what a requires_action run
// waits for, and queues the run again. Errors: persist.ErrRunNotFound,
// persist.ErrRunNotWaiting, persist.ErrActionMismatch, *persist.DecisionError.
func (s *Service) ResolveAction(ctx context.Context, p agentd.ActionParams) (agentd.Run, error) {
	return s.e.cfg.Store.RunResolveAction(ctx, p)
}

// interruptTimeout caps the write of an interrupt after a client left.
const interruptTimeout = 5 * time.Second

// ClientLeft applies the run's on_disconnect policy once the client of its
// stream from POST /runs went away before the run ended: with interrupt, the
// run stops at its next safe point as interrupted (a resume continues it);
// with continue, nothing happens. The write outlives ctx, which is usually
// the request of the client that left.
func (s *Service) ClientLeft(ctx context.Context, run agentd.Run) error {
	if run.Params.OnDisconnect != agentd.OnDisconnectInterrupt {
		return nil
	}
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interruptTimeout)
	defer cancel()
	if _, err := s.e.cfg.Store.RunInterrupt(ictx, run.ID); err != nil {
		return fmt.Errorf("interrupt run %s after its client left: %w", run.ID, err)
	}
	return nil
}

// create commits a new run, as Store.RunCreate does. When this instance has
// a free worker and the run can start at once (its conversation has nothing
// else in flight), that worker claims it in the same transaction and it
// starts executing here: no claim, and no wake-up of other instances.
//
// While runs this instance queued wait, a new run is queued behind them,
// and the engine's queue (queue.go) starts them in order.
func (e *Engine) create(ctx context.Context, p persist.RunCreateParams) (agentd.Run, bool, error) {
	reserved, claiming := false, e.claiming != nil && e.claiming.Err() == nil
	if claiming {
		e.mu.Lock()
		waiting, full := e.queued > 0, e.queued >= maxQueued
		e.mu.Unlock()
		if !full {
			p.QueuedBy = e.cfg.WorkerID
		}
		if !waiting {
			select {
			case e.sem <- struct{}{}:
				reserved = true
			default:
			}
		}
	}
	if reserved {
		p.ClaimFor = &persist.ClaimFor{Worker: e.cfg.WorkerID, TTL: e.cfg.LeaseTTL, StepID: agentd.NewID()}
	}
	st, created, err := e.cfg.Store.RunCreateState(ctx, p)
	run := st.Run
	if err != nil || !created || run.Status != agentd.StatusRunning || run.LeaseOwner != e.cfg.WorkerID {
		if reserved {
			<-e.sem // not claimed here: queued, or an earlier run found by its key
		}
		if p.QueuedBy != "" && err == nil && created && run.Status == agentd.StatusQueued {
			var known *agentd.RunState
			if p.ConversationID == "" {
				known = &st
			}
			e.mu.Lock()
			e.enqueueLocked(run, known)
			e.mu.Unlock()
			if len(e.sem) < cap(e.sem) {
				e.kickQueue() // a worker came free meanwhile
			}
		}
		return run, created, err
	}
	e.m.claim(claimAtCreation)
	var known *agentd.RunState
	if p.ConversationID == "" {
		// A new conversation: the creation knows the run's whole state, so
		// the execution need not read it back.
		known = &st
	}
	if !e.launch(persist.Claim{Run: run, PrevStatus: agentd.StatusQueued, StartedStep: p.ClaimFor.StepID}, known, true) {
		// The engine began stopping meanwhile: hand the run back at once.
		<-e.sem
		e.handBack(run)
	}
	return run, true, nil
}
