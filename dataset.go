package agentd

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A dataset is a tenant's named, versioned set of cases that an evaluation
// runs an agent's versions on (docs/evals.md). Each change of its cases
// makes a new version; a version is immutable, so that an evaluation that
// names one reads the same cases whatever is changed meanwhile. A case is
// stored whole: a case captured from a run holds what a fork of the run
// needs, and still works after the run is deleted.

// Dataset is one version of a tenant's dataset.
type Dataset struct {
	TenantID    string
	Name        string
	Description string
	Metadata    json.RawMessage // a JSON object, or nil
	Version     int
	// Change is what made the version, and ChangedCases the ids of the
	// cases it added or removed.
	Change       DatasetChange
	ChangedCases []string
	// CaseCount is how many cases the version holds.
	CaseCount int
	// Actor is the credential that made the version, CreatedAt when.
	Actor     string
	CreatedAt time.Time
	// LatestVersion is the dataset's latest version when the row was read.
	LatestVersion int
}

// DatasetChange is what made a version of a dataset.
type DatasetChange string

// Changes of a dataset.
const (
	DatasetCreated     DatasetChange = "created"      // POST /datasets: version 1, or the next of a deleted dataset's name
	DatasetCasesAdded  DatasetChange = "cases_added"  // POST /datasets/{name}/cases
	DatasetCaseRemoved DatasetChange = "case_removed" // DELETE /datasets/{name}/cases/{case_id}
)

// DatasetChanges lists every change of a dataset.
func DatasetChanges() []DatasetChange {
	return []DatasetChange{DatasetCreated, DatasetCasesAdded, DatasetCaseRemoved}
}

// CaseKind says what a case starts from.
type CaseKind string

// Kinds of case.
const (
	// CaseInput starts a new conversation with the case's input.
	CaseInput CaseKind = "input"
	// CaseFromRun starts from a recorded run's conversation after one of
	// its steps (Recorded), as a fork does, then the case's input if any.
	CaseFromRun CaseKind = "from_run"
)

// CaseKinds lists every kind of case.
func CaseKinds() []CaseKind { return []CaseKind{CaseInput, CaseFromRun} }

// DatasetCase is one case of a dataset, as it is stored and shown: what
// an evaluation's run starts from, the checks that score it, and the
// stubs that answer its tools.
type DatasetCase struct {
	// ID is the case's id in its dataset, the same in every version
	// that holds it: ^[a-zA-Z0-9_-]{1,64}$.
	ID string `json:"id"`
	// Name is a label for people (reports), optional.
	Name string `json:"name,omitempty"`
	// Input is the run's input as POST /runs takes it (a string, or
	// messages with parts); for a case from a run, what follows the
	// recorded conversation (nothing: none).
	Input json.RawMessage `json:"input,omitempty"`
	// Variables fill the agent's instructions; User is the run's end
	// user. A case from a run has the run's unless it gives its own.
	Variables map[string]string `json:"variables,omitempty"`
	User      string            `json:"user,omitempty"`
	// FromRun and AtStep name the run and the step a case from a run was
	// captured from (its provenance: the run may since be gone).
	FromRun string `json:"from_run,omitempty"`
	AtStep  *int   `json:"at_step,omitempty"`
	// Recorded is what a case from a run copied of it.
	Recorded *Recorded       `json:"recorded,omitempty"`
	Checks   []Check         `json:"checks"`
	Stubs    []Stub          `json:"stubs"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Kind is the kind of c.
func (c DatasetCase) Kind() CaseKind {
	if c.Recorded != nil {
		return CaseFromRun
	}
	return CaseInput
}

// Recorded is what a case copied of a recorded run: the conversation up
// to the end of the step it starts after, as a fork's input would hold it
// (its tool calls with their results as they were recorded, the user's
// images and files with their bytes), and the calls the run made after
// that step with their results, which an evaluation may answer the same
// calls with.
type Recorded struct {
	// Agent and Model are the run's, for the report: an evaluation runs
	// the versions it is asked to.
	Agent *AgentRef `json:"agent"`
	Model string    `json:"model"`
	// AsOf is when the step committed (the run's creation for step 0):
	// an evaluation reads memory as it was then.
	AsOf     time.Time      `json:"as_of"`
	Messages []CaseMessage  `json:"messages"`
	Calls    []RecordedCall `json:"calls"`
}

// CaseMessage is a message of a recorded conversation, in the shape of
// POST /runs' input extended with tool calls and their results: role
// user, assistant or system with content (a string, or a list of parts as
// POST /runs takes them: an image or a file carries its bytes as a data
// URL); an assistant message's tool calls; a message of role tool with
// the result (content, a string) of the call tool_call_id names.
type CaseMessage struct {
	Role       Role            `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []CaseCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	IsError    bool            `json:"is_error,omitempty"` // role tool: the result was an error
}

// CaseCall is a tool call of a recorded assistant message.
type CaseCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"` // the model's JSON text
}

// RecordedCall is a tool call a recorded run made after the step a case
// starts after, with the result its model was given.
type RecordedCall struct {
	Step      int    `json:"step"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"` // the model's JSON text
	Result    string `json:"result"`    // what the model was given
	IsError   bool   `json:"is_error,omitempty"`
}

// Stub is what a tool returns in a case: a call of Tool whose arguments
// hold Match (a subset of them; nil: any call) is answered with Result,
// and the tool is not called.
type Stub struct {
	Tool    string          `json:"tool"`
	Match   json.RawMessage `json:"match,omitempty"`
	Result  json.RawMessage `json:"result"`
	IsError bool            `json:"is_error,omitempty"`
}

// CheckType is the kind of a check of a case.
type CheckType string

// Checks of a case. Each reads what was stored of the case's run.
const (
	CheckEquals       CheckType = "equals"         // the answer is Value
	CheckContains     CheckType = "contains"       // the answer holds Value
	CheckRegex        CheckType = "regex"          // the answer matches Pattern (RE2)
	CheckJSONSchema   CheckType = "json_schema"    // the answer is JSON valid under Schema
	CheckCalled       CheckType = "called"         // Tool was called (with Arguments among its arguments; Count times)
	CheckNotCalled    CheckType = "not_called"     // Tool was not called (with Arguments among its arguments)
	CheckStatus       CheckType = "status"         // the run ended with Status (and Reason)
	CheckMaxSteps     CheckType = "max_steps"      // the run took at most Max steps
	CheckMaxCost      CheckType = "max_cost"       // the run cost at most Max
	CheckMaxLatencyMS CheckType = "max_latency_ms" // the run took at most Max milliseconds
	CheckRubric       CheckType = "rubric"         // a judge model grades the answer by Rubric (not deterministic)
	CheckWebhook      CheckType = "webhook"        // the tenant's endpoint at URL scores the case and its run
)

// CheckRefused is the type of the score an evaluation's run gets, beside
// its case's checks, when it ended at a call that might have had a side
// effect (EvalRefusedPrefix): never a check a case may hold.
const CheckRefused CheckType = "refused"

// CheckTypes lists every type of check.
func CheckTypes() []CheckType {
	return []CheckType{CheckEquals, CheckContains, CheckRegex, CheckJSONSchema, CheckCalled, CheckNotCalled,
		CheckStatus, CheckMaxSteps, CheckMaxCost, CheckMaxLatencyMS, CheckRubric, CheckWebhook}
}

// Fields returns the fields of a check of type t beside "type" and
// "name": those it needs, and those it may have. A status check needs
// one of its optional fields at least.
func (t CheckType) Fields() (required, optional []string) {
	switch t {
	case CheckEquals, CheckContains:
		return []string{"value"}, nil
	case CheckRegex:
		return []string{"pattern"}, nil
	case CheckJSONSchema:
		return []string{"schema"}, nil
	case CheckCalled:
		return []string{"tool"}, []string{"arguments", "count"}
	case CheckNotCalled:
		return []string{"tool"}, []string{"arguments"}
	case CheckStatus:
		return nil, []string{"status", "reason"}
	case CheckMaxSteps, CheckMaxCost, CheckMaxLatencyMS:
		return []string{"max"}, nil
	case CheckRubric:
		return []string{"rubric"}, []string{"model", "threshold"}
	case CheckWebhook:
		return []string{"url"}, nil
	}
	return nil, nil
}

// CheckedStatuses are the statuses a status check may name: those a run
// stops at, for good or until a client acts.
func CheckedStatuses() []RunStatus {
	var out []RunStatus
	for _, st := range RunStatuses() {
		if st.Stopped() || st == StatusRequiresAction {
			out = append(out, st)
		}
	}
	return out
}

// Check is one check of a case, as stored: its type, and the fields of
// its type (CheckType.Fields).
type Check struct {
	Type      CheckType       `json:"type"`
	Name      string          `json:"name,omitempty"`      // a label for the report
	Value     string          `json:"value,omitempty"`     // equals, contains
	Pattern   string          `json:"pattern,omitempty"`   // regex
	Schema    json.RawMessage `json:"schema,omitempty"`    // json_schema
	Tool      string          `json:"tool,omitempty"`      // called, not_called
	Arguments json.RawMessage `json:"arguments,omitempty"` // called, not_called: a subset of a call's arguments
	Count     *int            `json:"count,omitempty"`     // called: exactly this many calls
	Status    RunStatus       `json:"status,omitempty"`    // status
	Reason    Reason          `json:"reason,omitempty"`    // status
	Max       *float64        `json:"max,omitempty"`       // max_steps, max_cost, max_latency_ms
	Rubric    string          `json:"rubric,omitempty"`    // rubric
	Model     string          `json:"model,omitempty"`     // rubric: the judge (the server's default otherwise)
	Threshold *float64        `json:"threshold,omitempty"` // rubric: the least passing score, 0 to 1
	URL       string          `json:"url,omitempty"`       // webhook
}

// StoredCase is a case as a version of its dataset holds it.
type StoredCase struct {
	Case DatasetCase
	// Seq is the case's place in its dataset (the order cases were
	// added), AddedIn the version that added it.
	Seq, AddedIn int
	Bytes        int // of its JSON
	Actor        string
	CreatedAt    time.Time
}

// DatasetDefine is a new dataset, as a store is asked to keep it.
type DatasetDefine struct {
	TenantID, Name, Description string
	Metadata                    json.RawMessage
	Actor                       string
	Cases                       []DatasetCase // each one checked
}

// CasesAdd adds cases to a tenant's dataset, in its next version.
type CasesAdd struct {
	TenantID, Name, Actor string
	Cases                 []DatasetCase // each one checked
	// MaxCases bounds the cases the new version may hold (0: unbounded).
	MaxCases int
}

// DatasetLimit names a limit of datasets.
type DatasetLimit string

// Datasets' limits.
const (
	LimitCasesPerDataset DatasetLimit = "cases_per_dataset"
	LimitBytesPerCase    DatasetLimit = "bytes_per_case"
)

// DatasetLimitNames lists every limit of datasets.
func DatasetLimitNames() []DatasetLimit {
	return []DatasetLimit{LimitCasesPerDataset, LimitBytesPerCase}
}

// DatasetLimitError says that a change was refused because it would pass
// a limit: the limit's name, its value, and what the change would have
// made.
type DatasetLimitError struct {
	Limit DatasetLimit
	Max   int64
	Would int64
}

func (e *DatasetLimitError) Error() string {
	return fmt.Sprintf("dataset limit %s is %d; the change would make %d", e.Limit, e.Max, e.Would)
}

// Datasets' bounds.
const (
	MaxDatasetDescriptionBytes = 4096
	MaxCaseNameBytes           = 256
	MaxCaseChecks              = 64
	MaxCaseStubs               = 64
)

// Errors of datasets.
var (
	// ErrDatasetNotFound: the tenant has no dataset of that name (or it
	// was deleted), or not that version.
	ErrDatasetNotFound = fmt.Errorf("dataset %w", ErrNotFound)
	// ErrDatasetExists: POST /datasets with a name the tenant uses.
	ErrDatasetExists = fmt.Errorf("dataset exists: %w", ErrConflict)
	// ErrCaseNotFound: the dataset's latest version has no case of that
	// id.
	ErrCaseNotFound = fmt.Errorf("dataset case %w", ErrNotFound)
)

// CaseExistsError says that a case's id is taken in its dataset's latest
// version.
type CaseExistsError struct{ ID string }

func (e *CaseExistsError) Error() string {
	return fmt.Sprintf("the dataset has a case %q already", e.ID)
}

// Is makes errors.Is(err, ErrConflict) true for a CaseExistsError.
func (e *CaseExistsError) Is(target error) bool { return target == ErrConflict }

// DatasetVersionError says that a dataset has no such version.
type DatasetVersionError struct {
	Name            string
	Version, Latest int
}

func (e *DatasetVersionError) Error() string {
	return fmt.Sprintf("dataset %s has no version %d (its latest is %d)", e.Name, e.Version, e.Latest)
}

// Is makes errors.Is(err, ErrDatasetNotFound) true for a
// DatasetVersionError.
func (e *DatasetVersionError) Is(target error) bool {
	return target == ErrDatasetNotFound || errors.Is(ErrDatasetNotFound, target)
}

// Object types of datasets' views.
const (
	ObjectDataset = "dataset"
	ObjectCase    = "dataset.case"
)

// DatasetView is a version of a dataset as the API shows it.
type DatasetView struct {
	Object        string          `json:"object"` // ObjectDataset
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Metadata      json.RawMessage `json:"metadata"`
	Version       int             `json:"version"`
	LatestVersion int             `json:"latest_version"`
	Change        DatasetChange   `json:"change"`
	ChangedCases  []string        `json:"changed_cases"`
	CaseCount     int             `json:"case_count"`
	CreatedBy     string          `json:"created_by"`
	CreatedAt     time.Time       `json:"created_at"`
}

// View is d's view.
func (d Dataset) View() DatasetView {
	v := DatasetView{Object: ObjectDataset, Name: d.Name, Description: d.Description, Metadata: d.Metadata,
		Version: d.Version, LatestVersion: d.LatestVersion, Change: d.Change, ChangedCases: d.ChangedCases,
		CaseCount: d.CaseCount, CreatedBy: d.Actor, CreatedAt: d.CreatedAt.UTC()}
	if len(v.Metadata) == 0 {
		v.Metadata = json.RawMessage("null")
	}
	if v.ChangedCases == nil {
		v.ChangedCases = []string{}
	}
	return v
}

// CaseView is a case as the API shows it: the case, every key present
// (null when it has no value), what it starts from, and the version of
// its dataset that added it. What GET answers may be sent back as a case
// as it is: the view's own keys are read-only.
type CaseView struct {
	Object    string            `json:"object"` // ObjectCase
	ID        string            `json:"id"`
	Name      *string           `json:"name"`
	Kind      CaseKind          `json:"kind"`
	Input     json.RawMessage   `json:"input"`
	Variables map[string]string `json:"variables"`
	User      *string           `json:"user"`
	FromRun   *string           `json:"from_run"`
	AtStep    *int              `json:"at_step"`
	Recorded  *Recorded         `json:"recorded"`
	Checks    []Check           `json:"checks"`
	Stubs     []Stub            `json:"stubs"`
	Metadata  json.RawMessage   `json:"metadata"`
	AddedIn   int               `json:"added_in"`
	CreatedBy string            `json:"created_by"`
	CreatedAt time.Time         `json:"created_at"`
}

// CaseViewKeys are the keys of a CaseView that are not its case's.
func CaseViewKeys() []string {
	return []string{"object", "kind", "added_in", "created_by", "created_at"}
}

// View is c's view.
func (c StoredCase) View() CaseView {
	k := c.Case
	v := CaseView{Object: ObjectCase, ID: k.ID, Name: nullIfZero(k.Name), Kind: k.Kind(), Input: k.Input, Variables: k.Variables,
		User: nullIfZero(k.User), FromRun: nullIfZero(k.FromRun), AtStep: k.AtStep, Recorded: k.Recorded, Checks: k.Checks,
		Stubs: k.Stubs, Metadata: k.Metadata, AddedIn: c.AddedIn, CreatedBy: c.Actor, CreatedAt: c.CreatedAt.UTC()}
	if v.Checks == nil {
		v.Checks = []Check{}
	}
	if v.Stubs == nil {
		v.Stubs = []Stub{}
	}
	if r := v.Recorded; r != nil && (r.Messages == nil || r.Calls == nil) {
		cp := *r
		if cp.Messages == nil {
			cp.Messages = []CaseMessage{}
		}
		if cp.Calls == nil {
			cp.Calls = []RecordedCall{}
		}
		v.Recorded = &cp
	}
	return v
}
