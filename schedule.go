package agentd

import (
	"encoding/json"
	"fmt"
	"time"
)

// A schedule starts runs by itself (POST /schedules, docs/schedules.md): at
// each slot of its cron expression, in its time zone, one run of its run
// template (a body of POST /runs), whatever instances run or die.

// ScheduleOverlap says what a slot does while the schedule's previous run
// has not ended.
type ScheduleOverlap string

// Overlap policies.
const (
	// OverlapSkip: the slot starts no run.
	OverlapSkip ScheduleOverlap = "skip"
	// OverlapEnqueue: the slot waits for the previous run to end, then
	// starts its run; the slots that pass meanwhile fold into it.
	OverlapEnqueue ScheduleOverlap = "enqueue"
	// OverlapAllow: the slot starts its run all the same.
	OverlapAllow ScheduleOverlap = "allow"
)

// ScheduleOverlaps lists the overlap policies, the default first.
func ScheduleOverlaps() []ScheduleOverlap {
	return []ScheduleOverlap{OverlapSkip, OverlapEnqueue, OverlapAllow}
}

// ScheduleCatchUp says what a schedule does of the slots that passed while
// no instance ran (when its due slot's next slot has passed too).
type ScheduleCatchUp string

// Catch-up policies.
const (
	// CatchUpSkip: the missed slots start no run.
	CatchUpSkip ScheduleCatchUp = "skip"
	// CatchUpOne: the latest missed slot starts one run, for them all.
	CatchUpOne ScheduleCatchUp = "one"
)

// ScheduleCatchUps lists the catch-up policies, the default first.
func ScheduleCatchUps() []ScheduleCatchUp { return []ScheduleCatchUp{CatchUpSkip, CatchUpOne} }

// DefaultScheduleMaxFailures is how many of a schedule's runs in a row may
// fail (failed or timed out) before it pauses itself, unless the operator
// says otherwise (AGENTD_SCHEDULE_MAX_FAILURES).
const DefaultScheduleMaxFailures = 5

// MaxScheduleRuns is how many of a schedule's latest outcomes its view
// shows (last_runs).
const MaxScheduleRuns = 5

// Schedule is a tenant's schedule.
type Schedule struct {
	ID       string
	TenantID string
	Name     string
	Cron     string
	Timezone string // an IANA name
	// Run is the schedule's run template: a body of POST /runs, as sent
	// (compacted).
	Run     json.RawMessage
	Overlap ScheduleOverlap
	CatchUp ScheduleCatchUp
	Paused  bool
	// PausedReason says why the schedule paused itself; empty for one a
	// client paused, or one that runs.
	PausedReason string
	// NextAt is the next slot to fire (a paused schedule's is recomputed
	// when it resumes).
	NextAt time.Time
	// ConsecutiveFailures counts the runs in a row that failed or timed
	// out (and the slots whose run could not be created); a completed run
	// sets it to zero.
	ConsecutiveFailures int
	// LastError says why the latest slot that started no run could not
	// (its template no longer builds a run, its conversation is gone...).
	LastError string
	// LastRunID is the latest run a slot started, and LastSlot its slot.
	LastRunID string
	LastSlot  *time.Time
	// CountedThrough is the latest slot whose run's end was counted in
	// ConsecutiveFailures.
	CountedThrough *time.Time
	// LastRuns are the outcomes of the latest slots that started runs,
	// newest first (at most MaxScheduleRuns).
	LastRuns  []ScheduleOutcome
	CreatedBy string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleOutcome is a run a slot started, as it is now.
type ScheduleOutcome struct {
	RunID        string    `json:"run_id"`
	ScheduledFor time.Time `json:"scheduled_for"`
	Status       RunStatus `json:"status"`
}

// ScheduleRef is the schedule, and the slot of it, that started a run.
type ScheduleRef struct {
	ID   string    `json:"id"`
	Slot time.Time `json:"slot"`
}

// ScheduleChange is what PATCH /schedules/{id} changes: each field when
// set.
type ScheduleChange struct {
	Paused   *bool
	Cron     *string
	Timezone *string
	Run      json.RawMessage // nil: unchanged
	Overlap  *ScheduleOverlap
	CatchUp  *ScheduleCatchUp
	// NextAt is the schedule's next slot after the change: set when the
	// timing changed or the schedule resumes.
	NextAt *time.Time
}

// Errors of schedules.
var (
	// ErrScheduleNotFound is the ErrNotFound of a schedule: the tenant has
	// none of that id.
	ErrScheduleNotFound = fmt.Errorf("schedule %w", ErrNotFound)
	// ErrScheduleExists is the ErrConflict of a schedule whose name the
	// tenant uses already.
	ErrScheduleExists = fmt.Errorf("schedule exists: %w", ErrConflict)
)

// ObjectSchedule is the object type of a ScheduleView.
const ObjectSchedule = "schedule"

// ScheduleView is a schedule as the API shows it.
type ScheduleView struct {
	ID       string          `json:"id"`
	Object   string          `json:"object"` // ObjectSchedule
	Name     string          `json:"name"`
	Cron     string          `json:"cron"`
	Timezone string          `json:"timezone"`
	Run      json.RawMessage `json:"run"`
	Overlap  ScheduleOverlap `json:"overlap"`
	CatchUp  ScheduleCatchUp `json:"catch_up"`
	Paused   bool            `json:"paused"`
	// PausedReason says why the schedule paused itself; nil otherwise.
	PausedReason *string `json:"paused_reason"`
	// NextAt is when the next slot fires; nil while paused.
	NextAt              *time.Time        `json:"next_at"`
	ConsecutiveFailures int               `json:"consecutive_failures"`
	LastError           *string           `json:"last_error"`
	LastRuns            []ScheduleOutcome `json:"last_runs"`
	CreatedBy           string            `json:"created_by"`
	CreatedAt           time.Time         `json:"created_at"`
	UpdatedAt           time.Time         `json:"updated_at"`
}

// View is s's view.
func (s Schedule) View() ScheduleView {
	v := ScheduleView{ID: s.ID, Object: ObjectSchedule, Name: s.Name, Cron: s.Cron, Timezone: s.Timezone, Run: s.Run,
		Overlap: s.Overlap, CatchUp: s.CatchUp, Paused: s.Paused, ConsecutiveFailures: s.ConsecutiveFailures,
		LastRuns: s.LastRuns, CreatedBy: s.CreatedBy, CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
	if s.PausedReason != "" {
		v.PausedReason = &s.PausedReason
	}
	if s.LastError != "" {
		v.LastError = &s.LastError
	}
	if !s.Paused {
		next := s.NextAt.UTC()
		v.NextAt = &next
	}
	if v.LastRuns == nil {
		v.LastRuns = []ScheduleOutcome{}
	}
	for i := range v.LastRuns {
		v.LastRuns[i].ScheduledFor = v.LastRuns[i].ScheduledFor.UTC()
	}
	if len(v.Run) == 0 {
		v.Run = json.RawMessage(`{}`)
	}
	return v
}
