package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd"
)

// Waiting for a run (POST /runs, GET /runs/{id}): a client that asks for
// it with Prefer: wait=N (RFC 7240) or ?wait=N (seconds) is answered when
// the run ends or waits for a decision, with the run as it is then, or
// after N seconds (at most the server's MaxWait) with the run as it is
// then: never an error for the wait's sake.

// DefaultMaxWait caps a wait unless the server says otherwise.
const DefaultMaxWait = 60 * time.Second

// HeaderPreferenceApplied says which preference of Prefer was applied.
const HeaderPreferenceApplied = "Preference-Applied"

// waitOf is the wait a request asks for, capped by the server (0: none):
// ?wait=N, a non-negative integer (422 naming wait otherwise), else
// Prefer's wait=N (a preference a server may ignore: one it cannot read
// is).
func (s *server) waitOf(r *http.Request) (d time.Duration, fromPrefer bool, err error) {
	if q := r.URL.Query(); q.Has("wait") {
		n, err := strconv.Atoi(q.Get("wait"))
		if err != nil || n < 0 {
			return 0, false, fieldError("wait", "must be a whole number of seconds, 0 or more (at most %d are waited)",
				int(s.maxWait.Seconds()))
		}
		return min(time.Duration(n)*time.Second, s.maxWait), false, nil
	}
	for _, h := range r.Header.Values("Prefer") {
		for _, pref := range strings.Split(h, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			value, _, _ = strings.Cut(strings.Trim(strings.TrimSpace(value), `"`), ";")
			if n, err := strconv.Atoi(strings.TrimSpace(value)); err == nil && n >= 0 {
				return min(time.Duration(n)*time.Second, s.maxWait), true, nil
			}
		}
	}
	return 0, false, nil
}

// settled reports whether run r is where a waiting client is answered:
// stopped (ended or interrupted), or waiting for a decision. A run that
// waits for its sub-agents is settled once one of them (or theirs) waits
// for a decision (answered reads that).
func settled(r agentd.Run) bool {
	return r.Status.Stopped() || (r.Status == agentd.StatusRequiresAction && r.Action().Type != agentd.ActionAgentRuns)
}

// subAgentsPoll is how often a wait for a run that waits for its
// sub-agents looks whether one of them waits for a decision: their events
// are not the run's, and do not wake its wait.
const subAgentsPoll = 250 * time.Millisecond

// waitRun waits up to d for run to settle and returns it as it is then
// (as it was, when it could not be read again). The client's going away
// ends the wait.
func (s *server) waitRun(ctx context.Context, run agentd.Run, d time.Duration) agentd.Run {
	if d <= 0 || s.events == nil {
		return run
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for !s.answered(wctx, run) && wctx.Err() == nil {
		if run.Status == agentd.StatusRequiresAction {
			select {
			case <-time.After(subAgentsPoll):
			case <-wctx.Done():
			}
		} else if _, err := s.events.WaitStop(wctx, run.ID, run.LastEventSeq); err != nil && wctx.Err() == nil {
			s.log.WarnContext(ctx, "wait for a run", "run_id", run.ID, "error", err)
			return run
		}
		if ctx.Err() != nil {
			return run
		}
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		now, err := s.store.RunGet(rctx, run.TenantID, run.ID)
		rcancel()
		if err != nil {
			return run
		}
		run = now
	}
	return run
}

// answered reports whether a wait for run r is over (RunView.Settled): it
// stopped, or waits for a decision, its own or a sub-agent's.
func (s *server) answered(ctx context.Context, r agentd.Run) bool {
	if settled(r) || r.Status != agentd.StatusRequiresAction {
		return settled(r)
	}
	v, err := s.viewWithChildren(ctx, r)
	return err == nil && v.Settled()
}

// applied says, for a wait asked with Prefer, that it was applied.
func applied(w http.ResponseWriter, d time.Duration, fromPrefer bool) {
	if fromPrefer {
		w.Header().Set(HeaderPreferenceApplied, "wait="+strconv.Itoa(int(d.Seconds())))
	}
}
