package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// An evaluation runs versions of an agent on the cases of a version of a
// dataset (docs/evals.md): each case, version and repetition is a run,
// made by the evaluation's driver while the evaluation is running and
// scored from what was stored once it ended. Its runs never have a side
// effect: a tool call is answered by the case's recorded result, its
// stub, or the tool itself only when the tool is read_only; any other
// call ends the run failed (ReasonToolError, its error beginning with
// EvalRefusedPrefix), naming the tool.

// EvalStatus is where an evaluation is.
type EvalStatus string

// Statuses of an evaluation.
const (
	EvalRunning   EvalStatus = "running"   // its runs are being made and scored
	EvalCompleted EvalStatus = "completed" // every run was made and scored
	EvalCancelled EvalStatus = "cancelled" // a client cancelled it; its runs in flight were cancelled
	EvalFailed    EvalStatus = "failed"    // it could not go on (Error says why: an agent version gone)
)

// EvalStatuses lists every status of an evaluation.
func EvalStatuses() []EvalStatus {
	return []EvalStatus{EvalRunning, EvalCompleted, EvalCancelled, EvalFailed}
}

// Ended reports whether an evaluation in status s is over.
func (s EvalStatus) Ended() bool { return s != EvalRunning }

// CandidateLabel names an evaluation's unsaved candidate definition among
// its versions.
const CandidateLabel = "candidate"

// Evaluation is one evaluation: what it runs, and where it is.
type Evaluation struct {
	ID, TenantID string
	// Agent is the agent whose versions it runs; Versions their labels
	// ("2", or CandidateLabel for Candidate), Baseline the one the others
	// are compared with.
	Agent     string
	Versions  []string
	Baseline  string
	Candidate json.RawMessage // an agent definition as PUT /agents/{name} takes it, or nil
	// Dataset and DatasetVersion name the cases.
	Dataset        string
	DatasetVersion int
	// Repeat is the runs a case gets per version; Concurrency the most of
	// its runs in flight at once.
	Repeat, Concurrency int
	Status              EvalStatus
	Error               string
	Metadata            json.RawMessage
	Actor               string
	CreatedAt           time.Time
	FinishedAt          *time.Time
	// Runs is how many runs it makes, Scored how many of them are scored.
	Runs, Scored int
}

// EvalVersion is the agent version a label names: its number, or 0 for
// the candidate.
func EvalVersion(label string) (int, error) {
	if label == CandidateLabel {
		return 0, nil
	}
	n, err := strconv.Atoi(label)
	if err != nil || n < 1 || strconv.Itoa(n) != label {
		return 0, fmt.Errorf("%q is not a version: a number from 1, or %q", label, CandidateLabel)
	}
	return n, nil
}

// EvalRun is one run of an evaluation: a case, a version and a
// repetition; the run once made, and its scores once it ended.
type EvalRun struct {
	EvalID  string
	CaseSeq int // the case's place in its dataset
	CaseID  string
	Version string // a label of Evaluation.Versions
	Rep     int    // from 1
	RunID   string // "": not made yet
	// RunStatus is the run's status, on the reads that join it ("": the
	// run is gone, or not read).
	RunStatus RunStatus
	// RunCreatedAt and RunFinishedAt are the run's, on the reads that
	// join it: its latency.
	RunCreatedAt  time.Time
	RunFinishedAt *time.Time
	// Passed is whether every scored check passed and the run was not
	// refused; nil until scored.
	Passed   *bool
	Scores   []Score
	ScoredAt *time.Time
}

// Key is r's place in its evaluation, unique there.
func (r EvalRun) Key() string { return fmt.Sprintf("%s/%s/%d", r.CaseID, r.Version, r.Rep) }

// RunEval is what an evaluation's run knows of its evaluation
// (RunParams.Eval): which it is, and what answers its tools.
type RunEval struct {
	ID   string `json:"id"`
	Case string `json:"case"`
	// Stubs answer calls of their tools; Recorded are the calls a case
	// from a run recorded after its step, which answer the same calls
	// again with their results.
	Stubs    []Stub         `json:"stubs,omitempty"`
	Recorded []RecordedCall `json:"recorded,omitempty"`
}

// EvalCreate is a new evaluation, as a store is asked to keep it: with
// one EvalRun (not yet made) per case, version and repetition.
type EvalCreate struct {
	Eval  Evaluation
	Cases []StoredCase
}

// EvalRefusedPrefix begins the error of an evaluation's run that ended
// at a call that might have had a side effect.
const EvalRefusedPrefix = "not called in an evaluation"

// ErrEvalNotFound: the tenant has no evaluation of that id.
var ErrEvalNotFound = fmt.Errorf("evaluation %w", ErrNotFound)

// ErrEvalEnded: the evaluation already ended.
var ErrEvalEnded = errors.New("evaluation already ended")

// Evaluations' bounds.
const (
	MaxEvalVersions    = 5
	MaxEvalRepeat      = 10
	MaxEvalConcurrency = 32
	// DefaultEvalConcurrency is an evaluation's concurrency when its
	// request names none.
	DefaultEvalConcurrency = 4
	// MaxEvalRuns bounds the runs of one evaluation (cases × versions ×
	// repetitions).
	MaxEvalRuns = 5000
	// MaxRunningEvals bounds a tenant's evaluations running at once.
	MaxRunningEvals = 4
)

// ErrEvalsRunning: the tenant has MaxRunningEvals evaluations running.
var ErrEvalsRunning = fmt.Errorf("the tenant has %d evaluations running: cancel one, or wait for one to end", MaxRunningEvals)
