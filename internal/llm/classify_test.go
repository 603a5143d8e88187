package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The classifier is the adapters' one: it reads what any provider says in
// the error shape OpenAI's and Anthropic's APIs share, and classifies it
// from a failure that names no SDK. Here it is fed Anthropic's answers, as
// its native adapter will feed it.
func TestClassifyIsProviderNeutral(t *testing.T) {
	t.Parallel()
	const key = "sk-ant-api03-SECRET-0123456789"
	sc := scrubber{key: key}
	live := context.Background()
	cause := errors.New("cut by the caller")
	dead, cancel := context.WithCancelCause(live)
	cancel(cause)
	idle, stop := context.WithCancelCause(live)
	stop(errIdle)
	failed := errors.New("request failed")
	tests := []struct {
		name      string
		ctx, sctx context.Context
		f         failure
		kind      ErrorKind
		retry     time.Duration
		typ, msg  string
	}{
		{"overloaded", live, live, failure{err: failed, status: 529,
			said: sc.said([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))},
			KindServer, 0, "overloaded_error", "Overloaded"},
		{"rate limited", live, live, failure{err: failed, status: 429, header: http.Header{"Retry-After": {"7"}},
			said: sc.said([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`))},
			KindRateLimited, 7 * time.Second, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"},
		{"prompt too long", live, live, failure{err: failed, status: 400,
			said: sc.said([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`))},
			KindContextOverflow, 0, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"},
		{"key refused", live, live, failure{err: failed, status: 401,
			said: sc.said([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + key + `"}}`))},
			KindAuth, 0, "authentication_error", "invalid x-api-key [redacted]"},
		{"event overloaded", live, live, failure{err: failed, status: 200, event: true,
			said: sc.said([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))},
			KindServer, 0, "overloaded_error", "Overloaded"},
		{"event rate limited", live, live, failure{err: failed, status: 200, event: true,
			said: sc.said([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`))},
			KindRateLimited, 0, "rate_limit_error", "slow down"},
		{"malformed stream", live, live, failure{err: failed, status: 200, malformed: true}, KindServer, 0, "", ""},
		{"transport", live, live, failure{err: io.ErrUnexpectedEOF}, KindConnection, 0, "", ""},
		{"idle", live, idle, failure{err: failed, status: 200}, KindIdle, 0, "", ""},
		{"cancelled", dead, dead, failure{err: failed, status: 500, said: said{msg: "ignored"}}, KindCancelled, 0, "", ""},
	}
	for _, tt := range tests {
		e := sc.classify(tt.ctx, tt.sctx, tt.f, time.Second)
		if e.Kind != tt.kind || e.RetryAfter != tt.retry || e.Type != tt.typ || e.Message != tt.msg {
			t.Errorf("%s: %+v, want kind %s, retry-after %s, type %q, message %q", tt.name, e, tt.kind, tt.retry, tt.typ, tt.msg)
		}
		if strings.Contains(e.Error(), key) {
			t.Errorf("%s: %q holds the key", tt.name, e.Error())
		}
	}
	if e := sc.classify(dead, dead, failure{err: failed}, 0); !errors.Is(e, cause) {
		t.Fatalf("a cancelled request's error %v does not wrap the cause", e)
	}
	if e := sc.classify(live, live, failure{err: errors.New("dial: Bearer " + key)}, 0); strings.Contains(e.Error(), key) {
		t.Fatalf("a transport error holds the key: %v", e)
	}
}
