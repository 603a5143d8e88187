package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/agentd/agentd"
)

// TestInterruptedInputIsNotSentAgain: a queued run cancelled by if_busy:
// interrupt never answered its input; that input is marked aborted, so the
// next run's model request (its committed state) holds the new question
// only. A resume of the cancelled run gives its input back.
func TestInterruptedInputIsNotSentAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.createRun(`{"input": "first question"}`)
	second := b.createRun(`{"input": "second question", "conversation_id": "` + first.ConversationID + `", "if_busy": "interrupt"}`)
	if got := want[runBody](t, b.do("GET", "/runs/"+first.ID, ""), http.StatusOK); got.Status != "cancelled" {
		t.Fatalf("first run %s after if_busy interrupt", got.Status)
	}
	msgs := want[messageList](t, b.do("GET", "/conversations/"+first.ConversationID+"/messages", ""), http.StatusOK)
	if len(msgs.Data) != 2 || msgs.Data[0].Status != "aborted" || msgs.Data[1].Status != "completed" {
		t.Fatalf("messages after the interrupt: %+v", msgs.Data)
	}
	st, err := b.store.RunStateLoad(context.Background(), second.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Messages) != 1 || st.Messages[0].Content[0].Text != "second question" || st.Messages[0].Role != agentd.RoleUser {
		t.Fatalf("what the second run's model is sent: %+v", st.Messages)
	}
	// Once the second run is out of the way, the first may be resumed: its
	// question is asked again.
	want[runBody](t, b.do("POST", "/runs/"+second.ID+"/cancel", ""), http.StatusOK)
	want[runBody](t, b.do("POST", "/runs/"+first.ID+"/resume", ""), http.StatusOK)
	msgs = want[messageList](t, b.do("GET", "/conversations/"+first.ConversationID+"/messages", ""), http.StatusOK)
	if msgs.Data[0].Status != "completed" || msgs.Data[1].Status != "aborted" {
		t.Fatalf("messages after the resume of the first run: %+v", msgs.Data)
	}
}
