package api

import (
	"encoding/json"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools"
)

// The JSON shapes of responses. Field names are snake_case; absent values
// are null rather than missing, so that every object of a kind has the same
// keys.

type runJSON struct {
	ID             string              `json:"id"`
	Object         string              `json:"object"`
	TenantID       string              `json:"tenant_id"`
	ConversationID string              `json:"conversation_id"`
	Status         agentd.RunStatus    `json:"status"`
	TerminalReason *agentd.Reason      `json:"terminal_reason"`
	Model          string              `json:"model"`
	Instructions   *string             `json:"instructions"`
	Tools          []string            `json:"tools"` // null: every registered tool
	ClientTools    []agentd.ClientTool `json:"client_tools"`
	MaxSteps       int                 `json:"max_steps"`
	Timeouts       agentd.Timeouts     `json:"timeouts"`
	LoopLimits     agentd.LoopLimits   `json:"loop_limits"`
	CompactAt      *float64            `json:"compact_at"`
	OnDisconnect   agentd.OnDisconnect `json:"on_disconnect"`
	IfBusy         agentd.IfBusy       `json:"if_busy"`
	Metadata       json.RawMessage     `json:"metadata"`
	Usage          agentd.Usage        `json:"usage"`
	StepCount      int                 `json:"step_count"`
	LastEventSeq   int64               `json:"last_event_seq"`
	RequiredAction json.RawMessage     `json:"required_action"`
	Error          json.RawMessage     `json:"error"`
	CreatedAt      time.Time           `json:"created_at"`
	StartedAt      *time.Time          `json:"started_at"`
	FinishedAt     *time.Time          `json:"finished_at"`
	UpdatedAt      time.Time           `json:"updated_at"`
	DeadlineAt     *time.Time          `json:"deadline_at"`
	CreatedBy      *string             `json:"created_by"`
	CancelledBy    *string             `json:"cancelled_by"`
	ResumedBy      *string             `json:"resumed_by"`
	OutputText     *string             `json:"output_text"`
	Output         []agentd.Part       `json:"output"`
}

func runView(r agentd.Run) runJSON {
	md := r.Params.Metadata
	if len(md) == 0 {
		md = json.RawMessage(`{}`)
	}
	v := runJSON{
		ID:             r.ID,
		Object:         "run",
		TenantID:       r.TenantID,
		ConversationID: r.ConversationID,
		Status:         r.Status,
		TerminalReason: nullString(r.TerminalReason),
		Model:          r.Model,
		Instructions:   nullString(r.Params.Instructions),
		Tools:          r.Params.Tools,
		ClientTools:    clientToolsView(r.Params.ClientTools),
		MaxSteps:       r.Params.MaxSteps,
		Timeouts:       timeoutsView(r.Params.Timeouts),
		LoopLimits:     r.Params.LoopLimits.OrDefaults(),
		CompactAt:      nullFloat(r.Params.CompactAt),
		OnDisconnect:   r.Params.OnDisconnect,
		IfBusy:         r.Params.IfBusy,
		Metadata:       md,
		Usage:          r.Usage,
		StepCount:      r.StepCount,
		LastEventSeq:   r.LastEventSeq,
		RequiredAction: nullRaw(r.RequiredAction),
		Error:          nullRaw(r.Error),
		CreatedAt:      r.CreatedAt.UTC(),
		StartedAt:      utc(r.StartedAt),
		FinishedAt:     utc(r.FinishedAt),
		UpdatedAt:      r.UpdatedAt.UTC(),
		DeadlineAt:     utc(r.DeadlineAt),
		CreatedBy:      nullString(r.CreatedBy),
		CancelledBy:    nullString(r.CancelledBy),
		ResumedBy:      nullString(r.ResumedBy),
	}
	if len(r.Output) > 0 {
		// Written by the executor from []agentd.Part; a row it cannot read
		// shows no output rather than failing the read.
		if err := json.Unmarshal(r.Output, &v.Output); err == nil {
			text := agentd.TextOf(v.Output)
			v.OutputText = &text
		}
	}
	return v
}

type stepJSON struct {
	ID            string               `json:"id"`
	Seq           int                  `json:"seq"`
	Status        agentd.StepStatus    `json:"status"`
	FinishReason  *agentd.FinishReason `json:"finish_reason"`
	Transition    *agentd.Transition   `json:"transition"`
	ModelAttempts int                  `json:"model_attempts"`
	Usage         agentd.Usage         `json:"usage"`
	Error         json.RawMessage      `json:"error"`
	StartedAt     time.Time            `json:"started_at"`
	FinishedAt    *time.Time           `json:"finished_at"`
	ToolCalls     []toolCallJSON       `json:"tool_calls"`
}

type toolCallJSON struct {
	ID             string            `json:"id"`
	CallID         string            `json:"call_id"`
	Name           string            `json:"name"`
	Arguments      json.RawMessage   `json:"arguments"`
	IdempotencyKey string            `json:"idempotency_key"`
	Effect         agentd.Effect     `json:"effect"`
	Status         agentd.CallStatus `json:"status"`
	Result         json.RawMessage   `json:"result"`
	Error          json.RawMessage   `json:"error"`
	Attempts       int               `json:"attempts"`
	AttemptLog     []attemptJSON     `json:"attempt_log"`
	Policy         json.RawMessage   `json:"policy"`
	CreatedAt      time.Time         `json:"created_at"`
	FinishedAt     *time.Time        `json:"finished_at"`
}

type attemptJSON struct {
	N          int                  `json:"n"`
	Status     agentd.AttemptStatus `json:"status"`
	Error      json.RawMessage      `json:"error"`
	Worker     string               `json:"worker"`
	Epoch      int64                `json:"epoch"`
	StartedAt  time.Time            `json:"started_at"`
	FinishedAt *time.Time           `json:"finished_at"`
}

func stepView(st agentd.StepDetail) stepJSON {
	out := stepJSON{
		ID:            st.ID,
		Seq:           st.Seq,
		Status:        st.Status,
		FinishReason:  nullString(st.FinishReason),
		Transition:    nullString(st.Transition),
		ModelAttempts: st.ModelAttempts,
		Usage:         st.Usage,
		Error:         nullRaw(st.Error),
		StartedAt:     st.StartedAt.UTC(),
		FinishedAt:    utc(st.FinishedAt),
		ToolCalls:     make([]toolCallJSON, 0, len(st.Calls)),
	}
	for _, c := range st.Calls {
		tc := toolCallJSON{
			ID:             c.ID,
			CallID:         c.CallID,
			Name:           c.Name,
			Arguments:      nullRaw(c.Arguments),
			IdempotencyKey: c.IdempotencyKey,
			Effect:         c.Effect,
			Status:         c.Status,
			Result:         nullRaw(c.Result),
			Error:          nullRaw(c.Error),
			Attempts:       c.ToolCall.Attempts,
			AttemptLog:     make([]attemptJSON, 0, len(c.Attempts)),
			Policy:         nullRaw(c.Policy),
			CreatedAt:      c.CreatedAt.UTC(),
			FinishedAt:     utc(c.FinishedAt),
		}
		for _, a := range c.Attempts {
			tc.AttemptLog = append(tc.AttemptLog, attemptJSON{
				N:          a.N,
				Status:     a.Status,
				Error:      nullRaw(a.Error),
				Worker:     a.Worker,
				Epoch:      a.Epoch,
				StartedAt:  a.StartedAt.UTC(),
				FinishedAt: utc(a.FinishedAt),
			})
		}
		out.ToolCalls = append(out.ToolCalls, tc)
	}
	return out
}

type conversationJSON struct {
	ID        string          `json:"id"`
	Object    string          `json:"object"`
	TenantID  string          `json:"tenant_id"`
	Title     string          `json:"title"`
	Metadata  json.RawMessage `json:"metadata"`
	ChatID    *string         `json:"chat_id"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func conversationView(c agentd.Conversation) conversationJSON {
	md := c.Metadata
	if len(md) == 0 {
		md = json.RawMessage(`{}`)
	}
	return conversationJSON{
		ID:        c.ID,
		Object:    "conversation",
		TenantID:  c.TenantID,
		Title:     c.Title,
		Metadata:  md,
		ChatID:    nilIfEmpty(c.ChatID),
		CreatedAt: c.CreatedAt.UTC(),
		UpdatedAt: c.UpdatedAt.UTC(),
	}
}

type messageJSON struct {
	ID             string               `json:"id"`
	Object         string               `json:"object"`
	ConversationID string               `json:"conversation_id"`
	RunID          *string              `json:"run_id"`
	Seq            int                  `json:"seq"`
	Role           agentd.Role          `json:"role"`
	Content        []agentd.Part        `json:"content"`
	Status         agentd.MessageStatus `json:"status"`
	InContext      bool                 `json:"in_context"`
	CreatedAt      time.Time            `json:"created_at"`
}

func messageView(m agentd.Message) messageJSON {
	content := m.Content
	if content == nil {
		content = []agentd.Part{}
	}
	return messageJSON{
		ID:             m.ID,
		Object:         "message",
		ConversationID: m.ConversationID,
		RunID:          nullString(m.RunID),
		Seq:            m.Seq,
		Role:           m.Role,
		Content:        content,
		Status:         m.Status,
		InContext:      m.Status == agentd.MessageCompleted,
		CreatedAt:      m.CreatedAt.UTC(),
	}
}

type toolJSON struct {
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Parameters    json.RawMessage `json:"parameters"`
	Effect        string          `json:"effect"`
	TimeoutMS     *int64          `json:"timeout_ms"` // null: the run's tool timeout
	NeedsApproval bool            `json:"needs_approval"`
}

func toolView(sp tools.Spec) toolJSON {
	var timeout *int64
	if sp.Timeout > 0 {
		ms := sp.Timeout.Milliseconds()
		timeout = &ms
	}
	return toolJSON{
		Name:          sp.Name,
		Description:   sp.Description,
		Parameters:    nullRaw(sp.Parameters),
		Effect:        string(sp.Effect),
		TimeoutMS:     timeout,
		NeedsApproval: sp.NeedsApproval,
	}
}

// listJSON is the envelope of the lists that are not paged.
type listJSON[T any] struct {
	Data []T `json:"data"`
}

// pageJSON is a page of a paged list, the same on every such route:
// next_cursor, passed as "cursor", gives the next page; it is null and
// has_more false on the last page.
type pageJSON[T any] struct {
	Data       []T     `json:"data"`
	NextCursor *string `json:"next_cursor"`
	HasMore    bool    `json:"has_more"`
}

// page makes the page of items, fetched with one more than limit: when that
// one came, it is dropped and next is the cursor after the last item kept.
func page[R, T any](items []R, limit int, view func(R) T, next func(R) string) pageJSON[T] {
	out := pageJSON[T]{Data: make([]T, 0, min(len(items), limit))}
	if len(items) > limit {
		items = items[:limit]
		c := next(items[limit-1])
		out.NextCursor, out.HasMore = &c, true
	}
	for _, it := range items {
		out.Data = append(out.Data, view(it))
	}
	return out
}

func nullString[T ~string](s T) *T {
	if s == "" {
		return nil
	}
	return &s
}

// nullRaw makes an absent JSON value a JSON null.
func nullRaw(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// timeoutsView is a run's timeouts; a run stored before action timeouts
// existed waits DefaultActionMS.
func timeoutsView(t agentd.Timeouts) agentd.Timeouts {
	if t.ActionMS <= 0 {
		t.ActionMS = agentd.DefaultActionMS
	}
	return t
}

func nullFloat(f float64) *float64 {
	if f == 0 {
		return nil
	}
	return &f
}

// nilIfEmpty is s, or nil (JSON null) for "".
func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// clientToolsView is a run's client tools, or an empty list for none.
func clientToolsView(ts []agentd.ClientTool) []agentd.ClientTool {
	if ts == nil {
		return []agentd.ClientTool{}
	}
	return ts
}
