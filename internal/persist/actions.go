package persist

import (
	"context"
	"fmt"

	"github.com/agentd/agentd"

	"github.com/jackc/pgx/v5"
)

// RunResolveAction records a client's decision on the tool call a waiting run
// asks about and queues the run again. ErrRunNotFound, ErrRunNotWaiting,
// ErrActionMismatch and a *DecisionError say why nothing changed.
func (s *Store) RunResolveAction(ctx context.Context, p agentd.ActionParams) (agentd.Run, error) {
	var lastSeq int64
	err := s.tx(ctx, func(tx pgx.Tx) error {
		r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs WHERE id = $1 AND tenant_id = $2 FOR UPDATE`,
			p.RunID, p.TenantID))
		if err != nil {
			return notFound(err, agentd.ErrRunNotFound)
		}
		lastSeq, err = resolveLocked(ctx, tx, r, p, agentd.ResolvedByClient)
		return err
	})
	if err != nil {
		return agentd.Run{}, err
	}
	s.publish(p.RunID, lastSeq)
	return s.RunGet(ctx, p.TenantID, p.RunID)
}

// resolveLocked applies decision p to r, whose row the caller has locked,
// as resolvedBy (a client, or the action timeout), as agentd.Resolve says,
// and queues r again. It returns the run's new last event seq.
func resolveLocked(ctx context.Context, tx pgx.Tx, r agentd.Run, p agentd.ActionParams, resolvedBy string) (int64, error) {
	action := r.Action()
	var res []agentd.Resolution
	if p.Decision == agentd.DecisionOutputs {
		if err := p.Answers(r.Status, action); err != nil {
			return 0, err
		}
		var err error
		if res, err = agentd.ResolveOutputs(action, p, resolvedBy); err != nil {
			return 0, err
		}
	} else {
		one, err := agentd.Resolve(r.Status, action, p, resolvedBy)
		if err != nil {
			return 0, err
		}
		res = []agentd.Resolution{one}
	}
	evs := make([]agentd.EventIn, 0, len(res))
	for i, c := range res {
		id := action.ToolCallID
		var artifact *agentd.Artifact
		if p.Decision == agentd.DecisionOutputs {
			id, artifact = p.Outputs[i].ToolCallID, p.Outputs[i].Artifact
		} else if p.Decision == agentd.DecisionResult {
			artifact = p.Artifact
		}
		if err := applyResolution(ctx, tx, r.ID, id, c, artifact, p.Actor); err != nil {
			return 0, err
		}
		evs = append(evs, agentd.EventOf(r.StepCount, c.Event))
	}
	return requeue(ctx, tx, r, p.Actor, evs)
}

// applyResolution moves call id of run runID as c says, keeping who
// decided, and artifact (the whole result, when c's is its preview).
func applyResolution(ctx context.Context, tx pgx.Tx, runID, id string, c agentd.Resolution, artifact *agentd.Artifact, actor string) error {
	errJSON, err := jsonOrNull(c.Error)
	if err != nil {
		return err
	}
	var result []byte
	if len(c.Result) > 0 {
		result = c.Result
	}
	if _, err := tx.Exec(ctx, `UPDATE tool_calls SET status = $3, error = $4, result = coalesce($5, result), decided_by = $6,
		finished_at = CASE WHEN $7 THEN now() ELSE finished_at END
		WHERE id = $1 AND status = $2`, id, c.From, c.To, errJSON, result, nullIfEmpty(actor), c.To.Final()); err != nil {
		return fmt.Errorf("resolve tool call: %w", err)
	}
	if artifact != nil {
		a := artifact
		if _, err := tx.Exec(ctx, insertArtifact, a.ID, runID, id, a.MediaType, a.Size(), a.SHA256, a.Content); err != nil {
			return fmt.Errorf("keep the result's artifact: %w", err)
		}
	}
	return nil
}

// requeue appends evs to the log of r, a run whose decision was recorded,
// and queues it again, with the rest of its total timeout.
func requeue(ctx context.Context, tx pgx.Tx, r agentd.Run, actor string, evs []agentd.EventIn) (int64, error) {
	lastSeq, err := appendEvents(ctx, tx, r.ID, r.LastEventSeq, evs)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET status = 'queued', required_action = NULL, last_event_seq = $2,
		resumed_by = $3, updated_at = now() WHERE id = $1`, r.ID, lastSeq, nullIfEmpty(actor)); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, resumeBudget, r.ID); err != nil {
		return 0, fmt.Errorf("give back the total timeout: %w", err)
	}
	_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelRuns, r.ID)
	return lastSeq, err
}
