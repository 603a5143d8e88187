package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// conversationsNode runs one scenario of test/openai/conversations.mjs
// (the npm openai package, unchanged) against base and decodes what it
// prints.
func conversationsNode(t *testing.T, base, scenario string, out any) {
	t.Helper()
	dir, _ := filepath.Abs("../../test/openai")
	cmd := exec.Command("node", "conversations.mjs", base, scenario)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node conversations.mjs %s: %v\n%s", scenario, err, stderr.String())
	}
	var failed struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(stdout.Bytes(), &failed) == nil && len(failed.Error) > 0 {
		t.Fatalf("conversations.mjs %s failed: %s", scenario, failed.Error)
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("conversations.mjs %s printed %q: %v", scenario, stdout.String(), err)
	}
}

// convItem is what conversations.mjs reports of an item.
type convItem struct {
	ID, Type, Role, Text string
	CallID               string `json:"call_id"`
	Output               string
}

func (it convItem) String() string {
	switch it.Type {
	case "function_call":
		return "call(" + it.CallID + ")"
	case "function_call_output":
		return "output(" + it.CallID + ")=" + it.Output
	}
	return it.Role + ":" + it.Text
}

func convItems(items []convItem) string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.String()
	}
	return strings.Join(out, " | ")
}

// convError is what conversations.mjs reports of an error the SDK raised
// (nil: none).
type convError struct {
	Class, Param, Code, Message string
	Status                      int
}

// TestOpenAINodeConversationItems: OpenAI's Node.js SDK creates a
// conversation with items, adds items (a message, a function call with
// its output), lists them page by page, retrieves one, deletes one, and a
// response on the conversation is sent them; it raises its typed errors
// for a busy conversation, items agentd refuses, the delete of a function
// call, and an unknown item.
func TestOpenAINodeConversationItems(t *testing.T) {
	t.Parallel()
	needOpenAINode(t)
	base, _ := startServer(t, nil)

	t.Run("items", func(t *testing.T) {
		var r struct {
			ID, Object string
			Metadata   map[string]string
			Added      struct {
				Object  string
				First   string `json:"first_id"`
				Last    string `json:"last_id"`
				HasMore bool   `json:"has_more"`
				Data    []convItem
			}
			Before, After []convItem
			One           convItem
			Deleted       struct {
				ID, Object string
				Metadata   map[string]string
			}
			Gone     *convError
			Response struct {
				Status       string
				OutputText   string `json:"output_text"`
				Conversation struct{ ID string }
			}
		}
		conversationsNode(t, base, "items", &r)
		if !strings.HasPrefix(r.ID, "conv_") || r.Object != "conversation" || r.Metadata["topic"] != "demo" {
			t.Fatalf("created %+v", r)
		}
		const added = "call(call_x) | output(call_x)=sunny | user:/say Sunny in Paris, Ada."
		if got := convItems(r.Added.Data); got != added || r.Added.Object != "list" || r.Added.HasMore ||
			r.Added.First != r.Added.Data[0].ID || r.Added.Last != r.Added.Data[2].ID {
			t.Fatalf("added %+v (%s)", r.Added, got)
		}
		if got, want := convItems(r.Before), "system:Answer briefly. | user:My name is Ada. | assistant:Hello Ada. | "+added; got != want {
			t.Fatalf("listed %s, want %s", got, want)
		}
		if r.One.ID != r.Added.Data[2].ID || r.One.Text != "/say Sunny in Paris, Ada." {
			t.Fatalf("retrieved %+v", r.One)
		}
		if r.Deleted.ID != r.ID || r.Deleted.Object != "conversation" || r.Deleted.Metadata["topic"] != "demo" ||
			r.Gone == nil || r.Gone.Class != "NotFoundError" {
			t.Fatalf("deleted %+v, then retrieved it: %+v", r.Deleted, r.Gone)
		}
		// The response's input is a developer message: the fake model
		// followed the directive of the added user item.
		if r.Response.Status != "completed" || r.Response.OutputText != "Sunny in Paris, Ada." || r.Response.Conversation.ID != r.ID {
			t.Fatalf("response %+v", r.Response)
		}
		if got, want := convItems(r.After), "user:My name is Ada. | assistant:Hello Ada. | "+added+
			" | system:Use what the user said. | assistant:Sunny in Paris, Ada."; got != want {
			t.Fatalf("after the response: %s, want %s", got, want)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		var r struct {
			Busy, BusyDelete, BadRole, Unanswered, TooMany, DeleteCall, Unknown *convError
			Later                                                               []convItem
		}
		conversationsNode(t, base, "refusals", &r)
		for name, e := range map[string]*convError{"busy": r.Busy, "busy delete": r.BusyDelete} {
			if e == nil || e.Class != "ConflictError" || e.Status != 409 || e.Code != "conversation_busy" {
				t.Errorf("%s: %+v", name, e)
			}
		}
		for name, c := range map[string]struct {
			e     *convError
			param string
		}{"bad role": {r.BadRole, "items[0].role"}, "unanswered call": {r.Unanswered, "items"},
			"21 items": {r.TooMany, "items"}, "delete a call": {r.DeleteCall, "item_id"}} {
			if c.e == nil || c.e.Class != "BadRequestError" || c.e.Param != c.param {
				t.Errorf("%s: %+v, want a BadRequestError of %s", name, c.e, c.param)
			}
		}
		if r.Unknown == nil || r.Unknown.Class != "NotFoundError" {
			t.Errorf("unknown item: %+v", r.Unknown)
		}
		if convItems(r.Later) != "user:in time" {
			t.Errorf("after the response ended: %+v", r.Later)
		}
	})
}
