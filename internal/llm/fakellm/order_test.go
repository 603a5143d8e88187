package fakellm

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
)

// TestMessageOrder: a tool message must answer a call of the assistant
// message it follows, and every call must be answered by the tool messages
// right after it; otherwise the request gets OpenAI's 400, word for word,
// before any fault fires.
func TestMessageOrder(t *testing.T) {
	t.Parallel()
	const (
		asks     = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_0_0","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_0_1","type":"function","function":{"name":"g","arguments":"{}"}}]}`
		answer0  = `{"role":"tool","content":"a","tool_call_id":"call_0_0"}`
		answer1  = `{"role":"tool","content":"b","tool_call_id":"call_0_1"}`
		user     = `{"role":"user","content":"/call f\n/call g\n/fault 500"}`
		later    = `{"role":"user","content":"and then?"}`
		stray    = `{"error":{"message":"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.","type":"invalid_request_error","param":"messages.[%s].role","code":null}}`
		missing  = `{"error":{"message":"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s","type":"invalid_request_error","param":"messages.[%s].role","code":null}}`
		inOrder1 = user + "," + asks + "," + answer0 + "," + answer1
	)
	tests := []struct {
		name     string
		messages string
		body     string // "" for an answer
	}{
		{"in order", inOrder1, ""},
		{"answers in another order", user + "," + asks + "," + answer1 + "," + answer0, ""},
		{"two steps", inOrder1 + "," + asks + "," + answer0 + "," + answer1, ""},
		{"a user message between a call and its result", user + "," + asks + "," + answer0 + "," + later + "," + answer1,
			fmt.Sprintf(missing, "call_0_1", "3")},
		{"a user message before any result", user + "," + asks + "," + later + "," + answer0 + "," + answer1,
			fmt.Sprintf(missing, "call_0_0, call_0_1", "2")},
		{"a result without its call", user + "," + answer0, fmt.Sprintf(stray, "1")},
		{"a result answered twice", inOrder1 + "," + answer0, fmt.Sprintf(stray, "4")},
		{"a result of another call", user + `,{"role":"assistant","content":null,"tool_calls":[{"id":"x","type":"function","function":{"name":"f","arguments":"{}"}}]},` + answer0,
			fmt.Sprintf(stray, "2")},
		{"a result after the next turn", inOrder1 + "," + later + "," + answer1, fmt.Sprintf(stray, "5")},
		{"calls never answered", user + "," + asks + "," + answer0, fmt.Sprintf(missing, "call_0_1", "1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := New()
			srv := httptest.NewServer(s)
			defer srv.Close()
			res := post(t, srv, "/v1/chat/completions", `{"model":"m","messages":[`+tt.messages+`]}`)
			b, _ := io.ReadAll(res.Body)
			if tt.body == "" {
				// In order: the request is served, so its fault fires.
				if res.StatusCode != 500 {
					t.Fatalf("status %d: %s", res.StatusCode, b)
				}
				return
			}
			if res.StatusCode != 400 || string(b) != tt.body {
				t.Fatalf("status %d:\n got %s\nwant %s", res.StatusCode, b, tt.body)
			}
			if r := s.Requests(); len(r) != 1 || r[0].Status != 400 || r[0].Fault != "" || r[0].Error == "" {
				t.Fatalf("records %+v", r)
			}
		})
	}
}
