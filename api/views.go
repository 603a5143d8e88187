package api

import (
	"encoding/json"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/tools"
)

// The JSON shapes of responses are the domain's views (agentd.RunView and
// the others in views.go at the module's root), which the Go SDK reads
// too; the functions here build them from the rows. The names below are
// the ones the handlers have always used for them.
type (
	runJSON          = agentd.RunView
	stepJSON         = agentd.StepView
	toolCallJSON     = agentd.ToolCallView
	attemptJSON      = agentd.AttemptView
	conversationJSON = agentd.ConversationView
	messageJSON      = agentd.MessageView
	toolJSON         = agentd.ToolView
)

// listJSON is the envelope of the lists that are not paged.
type listJSON[T any] = agentd.List[T]

// pageJSON is a page of a paged list (see agentd.Page).
type pageJSON[T any] = agentd.Page[T]

// runView is the view of r (agentd.Run.View), without its cost.
func runView(r agentd.Run) runJSON { return r.View() }

func stepView(st agentd.StepDetail) stepJSON {
	out := stepJSON{
		ID:            st.ID,
		Seq:           st.Seq,
		Status:        st.Status,
		FinishReason:  nullString(st.FinishReason),
		Transition:    nullString(st.Transition),
		ModelAttempts: st.ModelAttempts,
		Usage:         st.Usage,
		Error:         agentd.StoredAs[agentd.ErrorDetail](st.Error),
		StartedAt:     st.StartedAt.UTC(),
		FinishedAt:    utc(st.FinishedAt),
		ToolCalls:     make([]toolCallJSON, 0, len(st.Calls)),
		Model:         nullString(st.Model),
	}
	for _, c := range st.Calls {
		out.ToolCalls = append(out.ToolCalls, toolCallView(c))
	}
	return out
}

func toolCallView(c agentd.CallDetail) toolCallJSON {
	tc := toolCallJSON{
		ID:             c.ID,
		CallID:         c.CallID,
		Name:           c.Name,
		Arguments:      nullRaw(c.Arguments),
		IdempotencyKey: c.IdempotencyKey,
		Effect:         c.Effect,
		Status:         c.Status,
		Result:         nullRaw(c.Result),
		Error:          agentd.StoredAs[agentd.ErrorDetail](c.Error),
		Attempts:       c.ToolCall.Attempts,
		AttemptLog:     make([]attemptJSON, 0, len(c.Attempts)),
		Policy:         nullRaw(c.Policy),
		CreatedAt:      c.CreatedAt.UTC(),
		FinishedAt:     utc(c.FinishedAt),
	}
	for _, a := range c.Attempts {
		tc.AttemptLog = append(tc.AttemptLog, attemptJSON{
			N:               a.N,
			Status:          a.Status,
			Error:           agentd.StoredAs[agentd.ErrorDetail](a.Error),
			Worker:          a.Worker,
			Epoch:           a.Epoch,
			StartedAt:       a.StartedAt.UTC(),
			FinishedAt:      utc(a.FinishedAt),
			ArgumentsSHA256: nullString(a.ArgumentsSHA256),
			ResultSHA256:    nullString(a.ResultSHA256),
		})
		if a.N == c.ToolCall.Attempts {
			tc.Receipt = receiptView(c.IdempotencyKey, a)
		}
	}
	return tc
}

// receiptView is the receipt of attempt a of the call whose idempotency
// key is key; nil when the attempt kept none (a read_only call's).
func receiptView(key string, a agentd.Attempt) *agentd.Receipt {
	if a.ArgumentsSHA256 == "" && a.ResultSHA256 == "" {
		return nil
	}
	return &agentd.Receipt{IdempotencyKey: key, Attempt: a.N, ArgumentsSHA256: nullString(a.ArgumentsSHA256),
		ResultSHA256: nullString(a.ResultSHA256)}
}

func conversationView(c agentd.Conversation) conversationJSON {
	md := c.Metadata
	if len(md) == 0 {
		md = json.RawMessage(`{}`)
	}
	return conversationJSON{
		ID:        c.ID,
		Object:    agentd.ObjectConversation,
		TenantID:  c.TenantID,
		Title:     c.Title,
		Metadata:  md,
		ChatID:    nilIfEmpty(c.ChatID),
		CreatedAt: c.CreatedAt.UTC(),
		UpdatedAt: c.UpdatedAt.UTC(),
	}
}

func messageView(m agentd.Message) messageJSON {
	content := m.Content
	if content == nil {
		content = []agentd.Part{}
	}
	return messageJSON{
		ID:             m.ID,
		Object:         agentd.ObjectMessage,
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
		Effect:        sp.Effect,
		TimeoutMS:     timeout,
		NeedsApproval: sp.NeedsApproval,
	}
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

// nilIfEmpty is s, or nil (JSON null) for "".
func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
