package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

// sampleSize is how many finished runs each check reads back.
const sampleSize = 20

// violationsMetric names the count of guarantee violations.
const violationsMetric = "guarantee violations"

// maxEvents bounds the events read back of one run: far more than a
// benchmark run has.
const maxEvents = 1 << 20

// checkRuns verifies the store's guarantees on a sample of the finished runs
// of the database at url, and that each SSE transcript (by run id) is what
// the store holds of its run. It prints each violation and returns their
// count as a metric.
func checkRuns(ctx context.Context, out io.Writer, phase string, store *persist.Store, url string, transcripts map[string][]sseEvent) (metric, error) {
	ids, err := sampleRuns(ctx, url, sampleSize)
	if err != nil {
		return metric{}, err
	}
	var violations []string
	keys := map[string]string{}
	for _, id := range ids {
		rec := runRecord{}
		if rec.run, err = store.RunByID(ctx, id); err != nil {
			return metric{}, err
		}
		if rec.events, err = store.EventsAfter(ctx, id, 0, maxEvents); err != nil {
			return metric{}, err
		}
		if rec.steps, err = store.StepsList(ctx, id); err != nil {
			return metric{}, err
		}
		for _, v := range rec.violations(keys) {
			violations = append(violations, "run "+id+": "+v)
		}
	}
	for id, seen := range transcripts {
		stored, err := store.EventsAfter(ctx, id, 0, maxEvents)
		if err != nil {
			return metric{}, err
		}
		if v := transcriptViolation(seen, stored); v != "" {
			violations = append(violations, "run "+id+": "+v)
		}
	}
	checked := plural(len(ids), "run")
	if len(transcripts) > 0 {
		checked += " and " + plural(len(transcripts), "SSE transcript")
	}
	fmt.Fprintf(out, "  %s: checked %s: %d guarantee violations\n", phase, checked, len(violations))
	for _, v := range violations {
		fmt.Fprintf(out, "    VIOLATION %s\n", v)
	}
	return metric{phase, violationsMetric, "", float64(len(violations)), noneEver()}, nil
}

// sampleRuns picks up to n runs at random among those that ended.
func sampleRuns(ctx context.Context, url string, n int) ([]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT id::text FROM runs WHERE status = ANY($1) ORDER BY random() LIMIT $2`,
		[]string{string(agentd.StatusCompleted), string(agentd.StatusFailed), string(agentd.StatusCancelled), string(agentd.StatusTimedOut)}, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// runRecord is what the store holds of one run.
type runRecord struct {
	run    agentd.Run
	events []agentd.Event
	steps  []agentd.StepDetail
}

// violations lists how a run that ended breaks the store's rules: its
// events are numbered 1..N without gap or duplicate, each envelope names its
// own row, exactly one terminal event ends them and agrees with the run's
// status; a tool call never succeeds twice and its idempotency key is its
// own (keys maps each key seen so far to its call, across runs); in a
// completed run every call succeeded exactly once in a completed step; the
// run's usage is the sum of its steps'.
func (rec runRecord) violations(keys map[string]string) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	r := rec.run
	terminals := 0
	for i, ev := range rec.events {
		if want := int64(i + 1); ev.Seq != want {
			bad("event seq %d where %d was due (a gap or a duplicate)", ev.Seq, want)
			break
		}
		var env struct {
			Seq   int64            `json:"seq"`
			Type  agentd.EventType `json:"type"`
			RunID string           `json:"run_id"`
		}
		if err := json.Unmarshal(ev.Data, &env); err != nil || env.Seq != ev.Seq || env.Type != ev.Type || env.RunID != r.ID {
			bad("event %d (%s): its data %s does not match it", ev.Seq, ev.Type, ev.Data)
		}
		if !ev.Type.Terminal() {
			continue
		}
		terminals++
		if i != len(rec.events)-1 {
			bad("terminal event %s at seq %d is not the last of %d", ev.Type, ev.Seq, len(rec.events))
		}
		if ev.Type != agentd.EventType("run."+string(r.Status)) {
			bad("terminal event %s for a run %s", ev.Type, r.Status)
		}
	}
	if terminals != 1 {
		bad("%d terminal events", terminals)
	}
	if n := int64(len(rec.events)); n != r.LastEventSeq {
		bad("%d events stored, last_event_seq %d", n, r.LastEventSeq)
	}
	var sum agentd.Usage
	for _, st := range rec.steps {
		sum = sum.Add(st.Usage)
		for _, c := range st.Calls {
			succeeded := 0
			for _, a := range c.Attempts {
				if a.Status == agentd.AttemptSucceeded {
					succeeded++
				}
			}
			if succeeded > 1 {
				bad("tool call %s succeeded %d times", c.ID, succeeded)
			}
			if c.IdempotencyKey == "" {
				bad("tool call %s has no idempotency key", c.ID)
			} else if other, ok := keys[c.IdempotencyKey]; ok && other != c.ID {
				bad("tool calls %s and %s share the idempotency key %s", other, c.ID, c.IdempotencyKey)
			}
			keys[c.IdempotencyKey] = c.ID
			if r.Status == agentd.StatusCompleted && (c.Status != agentd.CallSucceeded || succeeded != 1 || st.Status != agentd.StepCompleted) {
				bad("tool call %s of a completed run is %s with %d succeeded attempts, in a step %s", c.ID, c.Status, succeeded, st.Status)
			}
		}
	}
	if sum != r.Usage {
		bad("usage %+v, its steps' sum %+v", r.Usage, sum)
	}
	return out
}

// transcriptViolation says how the events a client was shown differ from
// the events stored after the run ended: nothing may be shown that is not
// stored, byte for byte and in the same order, and a client that read to
// the terminal event saw them all.
func transcriptViolation(seen []sseEvent, stored []agentd.Event) string {
	for i, ev := range seen {
		if i == len(stored) {
			return fmt.Sprintf("the client was shown event %s (%s), beyond the %d stored", ev.ID, ev.Event, len(stored))
		}
		st := stored[i]
		if ev.ID != strconv.FormatInt(st.Seq, 10) || ev.Event != string(st.Type) || ev.Data != string(st.Data) {
			return fmt.Sprintf("the client's event %d (id %s, %s, %s) is not the stored one (seq %d, %s, %s)",
				i+1, ev.ID, ev.Event, ev.Data, st.Seq, st.Type, st.Data)
		}
	}
	if len(seen) != len(stored) {
		return fmt.Sprintf("the client was shown %d events, %d are stored", len(seen), len(stored))
	}
	return ""
}
