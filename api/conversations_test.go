package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist"
)

type conversationBody struct {
	ID       string         `json:"id"`
	Title    string         `json:"title"`
	Metadata map[string]any `json:"metadata"`
}

type conversationList struct {
	Data       []conversationBody `json:"data"`
	NextCursor *string            `json:"next_cursor"`
	HasMore    bool               `json:"has_more"`
}

// TestConversationsLifecycle: a conversation is created, found by its
// metadata, renamed, refused deletion while a run of it is in progress, and
// then deleted with everything under it.
func TestConversationsLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do("POST", "/conversations", `{"title": "support", "metadata": {"user": "u1", "n": 2}}`)
	c := want[conversationBody](t, r, http.StatusCreated)
	if c.Title != "support" || c.Metadata["user"] != "u1" || r.header.Get("Location") != "/conversations/"+c.ID {
		t.Fatalf("created %+v, Location %q", c, r.header.Get("Location"))
	}
	run := b.createRun(`{"input": "hi", "conversation_id": "` + c.ID + `"}`)

	if l := want[conversationList](t, b.do("GET", "/conversations?metadata.user=u1", ""), http.StatusOK); len(l.Data) != 1 || l.Data[0].ID != c.ID {
		t.Fatalf("by metadata: %+v", l)
	}
	if l := want[conversationList](t, b.do("GET", "/conversations?metadata.user=u2", ""), http.StatusOK); len(l.Data) != 0 || l.HasMore {
		t.Fatalf("by other metadata: %+v", l)
	}
	renamed := want[conversationBody](t, b.do("PATCH", "/conversations/"+c.ID, `{"title": "billing"}`), http.StatusOK)
	if renamed.Title != "billing" || renamed.Metadata["user"] != "u1" {
		t.Fatalf("renamed: %+v", renamed)
	}
	wantProblem(t, b.do("PATCH", "/conversations/"+c.ID, `{"metadata": [1]}`), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("PATCH", "/conversations/"+c.ID, `{"owner": "x"}`), http.StatusUnprocessableEntity, "invalid_field")

	wantProblem(t, b.do("DELETE", "/conversations/"+c.ID, ""), http.StatusConflict, "conversation_busy")
	want[runBody](t, b.do("POST", "/runs/"+run.ID+"/cancel", ""), http.StatusOK)
	if r := b.do("DELETE", "/conversations/"+c.ID, ""); r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantProblem(t, b.do("GET", "/conversations/"+c.ID, ""), http.StatusNotFound, "conversation_not_found")
	wantProblem(t, b.do("GET", "/runs/"+run.ID, ""), http.StatusNotFound, "run_not_found")
	wantProblem(t, b.do("DELETE", "/conversations/"+c.ID, ""), http.StatusNotFound, "conversation_not_found")
	if _, err := b.store.RunByID(context.Background(), run.ID); !errors.Is(err, agentd.ErrNotFound) {
		t.Fatalf("the deleted conversation's run is still stored: %v", err)
	}
	if evs, err := b.store.EventsAfter(context.Background(), run.ID, 0, 100); err != nil || len(evs) != 0 {
		t.Fatalf("the deleted run's events: %d %v", len(evs), err)
	}
}

// TestConversationsPage: conversations page newest first by cursor, like
// runs and messages.
func TestConversationsPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for range 3 {
		ids = append(ids, want[conversationBody](t, b.do("POST", "/conversations", `{}`), http.StatusCreated).ID)
	}
	first := want[conversationList](t, b.do("GET", "/conversations?limit=2", ""), http.StatusOK)
	if len(first.Data) != 2 || first.Data[0].ID != ids[2] || !first.HasMore || first.NextCursor == nil {
		t.Fatalf("first page: %+v", first)
	}
	second := want[conversationList](t, b.do("GET", "/conversations?limit=2&cursor="+*first.NextCursor, ""), http.StatusOK)
	if len(second.Data) != 1 || second.Data[0].ID != ids[0] || second.HasMore || second.NextCursor != nil {
		t.Fatalf("second page: %+v", second)
	}
	wantProblem(t, b.do("GET", "/conversations?cursor="+*first.NextCursor+"x", ""), http.StatusUnprocessableEntity, "invalid_field")
	wantProblem(t, b.do("GET", "/conversations?owner=me", ""), http.StatusBadRequest, "unknown_parameter")
}

// TestMessagesSayWhetherTheModelSeesThem: once a compaction stands for a
// conversation's older messages, they are still listed, with in_context
// false; the first user message and the later ones stay in context.
func TestMessagesSayWhetherTheModelSeesThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.createRun(`{"input": [{"role": "user", "content": "first"}, {"role": "user", "content": "second"},
		{"role": "user", "content": "third"}]}`)
	ctx := context.Background()
	c, err := b.store.RunClaim(ctx, "w", time.Minute)
	if err != nil || c.ID != first.ID {
		t.Fatalf("claim: %v", err)
	}
	if _, err := b.store.Exec(ctx, persist.Fence{RunID: c.ID, Epoch: c.Epoch, Worker: "w"}, nil,
		persist.CompactionInsert{Compaction: agentd.Compaction{ID: agentd.NewID(), ConversationID: first.ConversationID,
			RunID: c.ID, StepID: agentd.NewID(), CoversToSeq: 2, MessagesCovered: 1, Summary: "s", TokensBefore: 10, TokensAfter: 5}}); err != nil {
		t.Fatal(err)
	}
	msgs := want[messageList](t, b.do("GET", "/conversations/"+first.ConversationID+"/messages", ""), http.StatusOK)
	var got []bool
	for _, m := range msgs.Data {
		got = append(got, m.InContext)
	}
	if len(got) != 3 || !got[0] || got[1] || !got[2] {
		t.Fatalf("in_context of seqs 1-3: %v, want true false true", got)
	}
}

// TestCompactAtIsAFraction: compact_at of POST /runs is kept on the run,
// and a value outside (0, 1) is refused.
func TestCompactAtIsAFraction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do("POST", "/runs", `{"input": "x", "compact_at": 0.5}`)
	var got struct {
		CompactAt *float64 `json:"compact_at"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != http.StatusAccepted || got.CompactAt == nil || *got.CompactAt != 0.5 {
		t.Fatalf("compact_at 0.5: %d %s", r.status, r.body)
	}
	for _, bad := range []string{"0", "1", "-0.2", "2"} {
		if p := wantProblem(t, b.do("POST", "/runs", `{"input": "x", "compact_at": `+bad+`}`), http.StatusUnprocessableEntity,
			"invalid_field"); p.Field != "compact_at" {
			t.Fatalf("compact_at %s: %+v", bad, p)
		}
	}
}
