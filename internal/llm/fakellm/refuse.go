package fakellm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// refusal is an error answer: its status and OpenAI's error body.
type refusal struct {
	status     int
	typ        string
	code       string // "" writes null
	param      string // "" leaves it out
	msg        string
	retryAfter string // the Retry-After header, if any
}

// invalid is an invalid_request_error of status, without code or param.
func invalid(status int, msg string) *refusal {
	return &refusal{status: status, typ: "invalid_request_error", msg: msg}
}

func (f *refusal) write(w http.ResponseWriter) {
	var e errorBody
	e.Error.Message, e.Error.Type = f.msg, f.typ
	if f.code != "" {
		e.Error.Code = &f.code
	}
	if f.param != "" {
		e.Error.Param = &f.param
	}
	b, _ := json.Marshal(e) // our own types always encode
	if f.retryAfter != "" {
		w.Header().Set("Retry-After", f.retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.status)
	_, _ = w.Write(b)
}

// contextLengthExceeded is OpenAI's answer, word for word, to a prompt of
// prompt tokens sent to a model whose window is window tokens.
func contextLengthExceeded(window, prompt int64) *refusal {
	return &refusal{status: http.StatusBadRequest, typ: "invalid_request_error", code: "context_length_exceeded", param: "messages",
		msg: fmt.Sprintf("This model's maximum context length is %d tokens. "+
			"However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, prompt)}
}

// orderRefusal is OpenAI's refusal of messages out of the order it
// requires, word for word (its spelling too), or nil when msgs are in
// order: each assistant message with tool_calls must be followed at once by
// one tool message for each of its calls, and a tool message must answer a
// call of the assistant message those tool messages follow. The first
// message out of order, in msgs' order, is the one refused.
func orderRefusal(msgs []wireMessage) *refusal {
	var buf [8]string  // room on the stack for the calls of most messages
	pending := buf[:0] // the calls of the last assistant message not yet answered
	asked := -1        // the index of that assistant message
	for i, m := range msgs {
		if m.Role == "tool" {
			k := slices.Index(pending, m.ToolCallID)
			if k < 0 {
				return outOfOrder(i, "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			pending = slices.Delete(pending, k, k+1)
			continue
		}
		if len(pending) > 0 {
			return unanswered(i, pending)
		}
		if m.Role == "assistant" {
			for _, tc := range m.ToolCalls {
				pending = append(pending, tc.ID)
			}
			asked = i
		}
	}
	if len(pending) > 0 {
		return unanswered(asked, pending)
	}
	return nil
}

// unanswered refuses the calls of ids, not answered where message i is.
func unanswered(i int, ids []string) *refusal {
	return outOfOrder(i, "An assistant message with 'tool_calls' must be followed by tool messages responding to each "+
		"'tool_call_id'. The following tool_call_ids did not have response messages: "+strings.Join(ids, ", "))
}

// outOfOrder refuses message i with msg, naming it as OpenAI does.
func outOfOrder(i int, msg string) *refusal {
	return &refusal{status: http.StatusBadRequest, typ: "invalid_request_error", param: "messages.[" + strconv.Itoa(i) + "].role", msg: msg}
}

// samplingRefusal refuses sampling parameters OpenAI refuses:
// max_completion_tokens below 1, temperature outside 0 to 2, top_p outside
// 0 to 1; nil when they are in range (or absent).
func samplingRefusal(req chatRequest) *refusal {
	out := func(param, msg string) *refusal {
		return &refusal{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, msg: msg}
	}
	if n := req.MaxCompletionTokens; n != nil && *n < 1 {
		return out("max_completion_tokens", fmt.Sprintf("Invalid 'max_completion_tokens': integer below minimum value. Expected a value >= 1, but got %d instead.", *n))
	}
	for _, f := range []struct {
		name string
		v    *float64
		max  float64
	}{{"temperature", req.Temperature, 2}, {"top_p", req.TopP, 1}} {
		switch {
		case f.v == nil:
		case *f.v < 0:
			return out(f.name, fmt.Sprintf("Invalid '%s': decimal below minimum value. Expected a value >= 0, but got %v instead.", f.name, *f.v))
		case *f.v > f.max:
			return out(f.name, fmt.Sprintf("Invalid '%s': decimal above maximum value. Expected a value <= %v, but got %v instead.", f.name, f.max, *f.v))
		}
	}
	return nil
}
