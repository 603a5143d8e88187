package agentd

import (
	"errors"
	"fmt"
	"time"
)

// Memory extraction (docs/memory.md, "Extraction"): once a run that asked
// for memory.extract completed, a job asks a model what of the run's turn
// is worth remembering, and writes it to the run's extract namespace. A
// run has at most one job; the instances share the jobs through the
// database.

// MemoryExtractionStatus is where an extraction job is: pending (due now
// or at its next attempt), running (an instance holds it until its lease
// ends), done (its items were written) or failed (it gave up; its error
// says why).
type MemoryExtractionStatus string

// Memory extraction statuses.
const (
	ExtractionPending MemoryExtractionStatus = "pending"
	ExtractionRunning MemoryExtractionStatus = "running"
	ExtractionDone    MemoryExtractionStatus = "done"
	ExtractionFailed  MemoryExtractionStatus = "failed"
)

// MemoryExtractionStatuses lists every extraction status.
func MemoryExtractionStatuses() []MemoryExtractionStatus {
	return []MemoryExtractionStatus{ExtractionPending, ExtractionRunning, ExtractionDone, ExtractionFailed}
}

// ExtractsMemory reports whether a run of params p that completed is
// extracted from: it asks for memory.extract, its memory is not off, it is
// kept (a run that is not stored leaves nothing to read, and asked that
// nothing be kept), and it is no fork's, nor of a fork's conversation or
// tree (those write only to the fork's overlay).
func (p RunParams) ExtractsMemory() bool {
	return p.Memory != nil && !p.Memory.Off && p.Memory.Extract != nil && len(p.Memory.Extract.Namespace) > 0 &&
		!p.Unstored && p.ForkedFrom == nil && p.Memory.Overlay == ""
}

// MemoryExtractor is the actor of the memory versions an extraction writes
// for run r: its agent ("agent:<name>") when it started from one, else
// whoever created it.
func MemoryExtractor(r Run) string {
	if r.Params.Agent != nil {
		return "agent:" + r.Params.Agent.Name
	}
	return r.CreatedBy
}

// MemoryExtraction is an extraction job: one per run that completed and
// asked for memory.extract.
type MemoryExtraction struct {
	ID        string
	TenantID  string
	RunID     string
	Namespace Namespace
	// Model is the model asked; "" until the first attempt chose the
	// server's default for a run that named none.
	Model  string
	Status MemoryExtractionStatus
	// Attempts counts the attempts begun (a claim begins one).
	Attempts int
	// NextAttempt is when a pending job is due; while it runs, when its
	// lease ends (an instance that died leaves it due again then).
	NextAttempt time.Time
	// LeasedBy is the instance's worker that holds a running job.
	LeasedBy string
	// Error is the last attempt's failure (a done job keeps none).
	Error string
	// Items counts the versions written (an item unchanged is not
	// written again).
	Items      int
	CreatedAt  time.Time
	FinishedAt *time.Time
}

// MemoryExtractionList pages a tenant's extraction jobs, newest first.
type MemoryExtractionList struct {
	Tenant string
	RunID  string // "": every run's
	// Before is the cursor: the id of the last job of the previous page;
	// "": from the newest.
	Before string
	Limit  int
}

// ObjectMemoryExtraction is the object of a MemoryExtractionView.
const ObjectMemoryExtraction = "memory.extraction"

// MemoryExtractionView is an extraction job as the API shows it.
type MemoryExtractionView struct {
	Object    string                 `json:"object"` // ObjectMemoryExtraction
	ID        string                 `json:"id"`
	RunID     string                 `json:"run_id"`
	Namespace Namespace              `json:"namespace"`
	Model     *string                `json:"model"`
	Status    MemoryExtractionStatus `json:"status"`
	Attempts  int                    `json:"attempts"`
	// NextAttemptAt is when a pending job is tried (again), when a
	// running one's lease ends; null once it finished.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	Error         *string    `json:"error"`
	Items         int        `json:"items"`
	CreatedAt     time.Time  `json:"created_at"`
	FinishedAt    *time.Time `json:"finished_at"`
}

// View is x as the API shows it.
func (x MemoryExtraction) View() MemoryExtractionView {
	v := MemoryExtractionView{Object: ObjectMemoryExtraction, ID: x.ID, RunID: x.RunID, Namespace: x.Namespace,
		Model: nullIfZero(x.Model), Status: x.Status, Attempts: x.Attempts, Error: nullIfZero(x.Error), Items: x.Items,
		CreatedAt: x.CreatedAt, FinishedAt: x.FinishedAt}
	if x.Status == ExtractionPending || x.Status == ExtractionRunning {
		at := x.NextAttempt
		v.NextAttemptAt = &at
	}
	return v
}

// ErrMemoryExtractionNotFound: the tenant has no such extraction job.
var ErrMemoryExtractionNotFound = fmt.Errorf("memory extraction %w", ErrNotFound)

// ErrExtractionLeaseLost: the extraction attempt no longer holds its job
// (its lease ended and another attempt began); nothing it would write is
// written.
var ErrExtractionLeaseLost = errors.New("memory extraction lease lost")
