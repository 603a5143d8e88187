package llm_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/agentd/agentd/internal/llm"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// secretKey is the API key of the tests that check it never shows: long
// and distinctive, so that finding it anywhere is a leak.
const secretKey = "sk-agentd-test-9f8e7d6c5b4a-SECRET"

// keyedModel returns an adapter for srv at base (a path under srv.URL)
// that sends key.
func keyedModel(t *testing.T, srv *httptest.Server, base, key string) *llm.OpenAI {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + base, APIKey: key, HTTPClient: &http.Client{Transport: tr}})
}

// answering returns a server that answers every request with status,
// content type and body, and the count of the requests it got.
func answering(status int, contentType, body string) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})), &n
}

// TestOpenAIErrorsKeepWhatTheProviderSaid: the status, and the code, type
// and message of an error body (or an excerpt of a body that is no OpenAI
// error), are kept on the *llm.Error, capped, and said by its text.
func TestOpenAIErrorsKeepWhatTheProviderSaid(t *testing.T) {
	t.Parallel()
	const html = `<html>
<head><title>502 Bad Gateway</title></head>
<body>
<center><h1>502 Bad Gateway</h1></center>
<hr><center>nginx</center>
</body>
</html>`
	long := strings.Repeat("é", 1000) // 2000 bytes
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		kind        llm.ErrorKind
		code, typ   string
		msg         string // exact, or with prefix a prefix
		prefix      bool
	}{
		{"openai 404", 404, "application/json",
			`{"error":{"message":"Invalid URL (POST /v1/chat/completions)","type":"invalid_request_error","param":null,"code":null}}`,
			llm.KindBadRequest, "", "invalid_request_error", "Invalid URL (POST /v1/chat/completions)", false},
		{"model not found", 404, "application/json",
			`{"error":{"message":"The model 'gpt-9' does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`,
			llm.KindBadRequest, "model_not_found", "invalid_request_error", "The model 'gpt-9' does not exist", false},
		{"plain 404", 404, "text/plain; charset=utf-8", "404 page not found\n", llm.KindBadRequest, "", "", "404 page not found", false},
		{"html 502", 502, "text/html", html, llm.KindServer, "", "", "502 Bad Gateway 502 Bad Gateway nginx", false},
		{"fastapi 404", 404, "application/json", `{"detail":"Not Found"}`, llm.KindBadRequest, "", "", "Not Found", false},
		{"error of a string", 503, "application/json", `{"error":"upstream is down"}`, llm.KindServer, "", "", "upstream is down", false},
		{"empty 500", 500, "application/json", ``, llm.KindServer, "", "", "", false},
		{"invalid key", 401, "application/json",
			`{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			llm.KindAuth, "invalid_api_key", "invalid_request_error", "Incorrect API key provided: sk-abc***xyz.", false},
		{"proxy 500 of a refused key", 500, "application/json",
			`{"error":{"message":"upstream said: Incorrect API key provided","type":"proxy_error"}}`,
			llm.KindAuth, "", "proxy_error", "upstream said: Incorrect API key provided", false},
		{"numeric code 401", 400, "application/json", `{"error":{"message":"unauthorized","code":401}}`,
			llm.KindAuth, "401", "", "unauthorized", false},
		{"control characters", 400, "application/json", `{"error":{"message":"bad\u0000 input\n\n\tline two"}}`,
			llm.KindBadRequest, "", "", "bad input line two", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := answering(tt.status, tt.contentType, tt.body)
			m := keyedModel(t, srv, "/v1", "test-key")
			_, err := m.Stream(t.Context(), user("hi"), nil)
			t.Logf("%v", err)
			e := asError(t, err)
			if e.Kind != tt.kind || e.Status != tt.status || e.Code != tt.code || e.Type != tt.typ || e.Message != tt.msg {
				t.Fatalf("error = %+v, want kind %s status %d code %q type %q message %q", e, tt.kind, tt.status, tt.code, tt.typ, tt.msg)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Error() = %q does not say %q", err.Error(), tt.msg)
			}
			if tt.kind == llm.KindAuth && llm.IsRetryable(err) {
				t.Fatalf("%v is retryable", err)
			}
		})
	}

	t.Run("caps", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			body string
			max  int
		}{
			{`{"error":{"message":"` + long + `","type":"invalid_request_error"}}`, llm.MaxMessageBytes},
			{"x" + long, llm.MaxExcerptBytes},
			{"<html><body>" + strings.Repeat("<p>gateway down</p>", 100) + "</body></html>", llm.MaxExcerptBytes},
		} {
			srv, _ := answering(400, "text/plain", c.body)
			m := keyedModel(t, srv, "/v1", "test-key")
			_, err := m.Stream(t.Context(), user("hi"), nil)
			e := asError(t, err)
			if len(e.Message) > c.max || len(e.Message) < c.max-8 || !utf8.ValidString(e.Message) || !strings.HasSuffix(e.Message, "…") {
				t.Fatalf("message of %d bytes (cap %d, valid UTF-8 %v): %q", len(e.Message), c.max, utf8.ValidString(e.Message), e.Message)
			}
		}
	})
}

// TestOpenAIBaseURLWithoutV1: a base URL that lacks its /v1 gets OpenAI's
// 404, and the error says so, path and all.
func TestOpenAIBaseURLWithoutV1(t *testing.T) {
	t.Parallel()
	fake := fakellm.New(fakellm.WithV1Only())
	m := keyedModel(t, httptest.NewServer(fake), "", "test-key")
	_, err := m.Stream(t.Context(), user("hi"), nil)
	e := asError(t, err)
	if e.Kind != llm.KindBadRequest || e.Status != 404 || e.Message != "Invalid URL (POST /chat/completions)" || llm.IsRetryable(err) {
		t.Fatalf("error = %+v", e)
	}
	if !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "Invalid URL (POST /chat/completions)") {
		t.Fatalf("Error() = %q", err.Error())
	}
	if fake.Calls() != 0 {
		t.Fatalf("the fake answered %d requests at the wrong path", fake.Calls())
	}
}

// TestOpenAIKeyRefusedMidStream: an error event that says the key is
// invalid is KindAuth, which no retry mends; other error events stay
// server errors, retried.
func TestOpenAIKeyRefusedMidStream(t *testing.T) {
	t.Parallel()
	const text = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"par"},"finish_reason":null}]}` + "\n\n"
	tests := []struct {
		name      string
		event     string
		kind      llm.ErrorKind
		code, typ string
		msg       string
	}{
		{"openai", `{"error":{"message":"Incorrect API key provided: sk-***","type":"invalid_request_error","code":"invalid_api_key"}}`,
			llm.KindAuth, "invalid_api_key", "invalid_request_error", "Incorrect API key provided: sk-***"},
		{"message only", `{"error":{"message":"Incorrect API key provided"}}`, llm.KindAuth, "", "", "Incorrect API key provided"},
		{"status 403", `{"error":{"message":"key not allowed for this model","status":403}}`, llm.KindAuth, "", "", "key not allowed for this model"},
		{"numeric code 401", `{"error":{"message":"unauthorized","code":401}}`, llm.KindAuth, "401", "", "unauthorized"},
		{"authentication_error", `{"error":{"message":"denied","type":"authentication_error"}}`, llm.KindAuth, "", "authentication_error", "denied"},
		{"server", `{"error":{"message":"upstream failed","type":"server_error"}}`, llm.KindServer, "", "server_error", "upstream failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, n := answering(200, "text/event-stream", text+"data: "+tt.event+"\n\n")
			m := keyedModel(t, srv, "/v1", "test-key")
			_, err := m.Stream(t.Context(), user("hi"), nil)
			e := asError(t, err)
			if e.Kind != tt.kind || e.Code != tt.code || e.Type != tt.typ || e.Message != tt.msg {
				t.Fatalf("error = %+v, want kind %s code %q type %q message %q", e, tt.kind, tt.code, tt.typ, tt.msg)
			}
			if llm.IsRetryable(err) != (tt.kind == llm.KindServer) {
				t.Fatalf("IsRetryable(%v) = %v", err, llm.IsRetryable(err))
			}
			if n.Load() != 1 {
				t.Fatalf("%d requests", n.Load())
			}
		})
	}
}

// TestOpenAIErrorsNeverHoldTheKey: a provider that echoes the API key, or
// the Authorization header, in its error gets neither into the *llm.Error's
// fields or text.
func TestOpenAIErrorsNeverHoldTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		kind        llm.ErrorKind
	}{
		{"401 body", 401, "application/json",
			`{"error":{"message":"Incorrect API key provided: ` + secretKey + `.","type":"invalid_request_error","code":"invalid_api_key"}}`, llm.KindAuth},
		{"plain body", 502, "text/plain", "proxy: upstream refused Authorization: Bearer " + secretKey + "\n", llm.KindServer},
		{"code", 400, "application/json", `{"error":{"message":"no","code":"bad_key_` + secretKey + `","type":"` + secretKey + `"}}`, llm.KindBadRequest},
		{"stream event", 200, "text/event-stream",
			`data: {"error":{"message":"Incorrect API key provided: ` + secretKey + `","type":"invalid_request_error","code":"invalid_api_key"}}` + "\n\n", llm.KindAuth},
		{"stream event of a string", 200, "text/event-stream", `data: {"error":"key ` + secretKey + ` expired"}` + "\n\n", llm.KindServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := answering(tt.status, tt.contentType, tt.body)
			m := keyedModel(t, srv, "/v1", secretKey)
			_, err := m.Stream(t.Context(), user("hi"), nil)
			e := asError(t, err)
			if e.Kind != tt.kind {
				t.Fatalf("kind %s, want %s: %v", e.Kind, tt.kind, err)
			}
			for what, s := range map[string]string{"Error()": err.Error(), "%+v": fmt.Sprintf("%+v", e),
				"Message": e.Message, "Code": e.Code, "Type": e.Type} {
				if strings.Contains(s, secretKey) || strings.Contains(s, "SECRET") {
					t.Fatalf("%s holds the key: %q", what, s)
				}
			}
			if !strings.Contains(e.Message+e.Code+e.Type, "[redacted]") {
				t.Fatalf("nothing was redacted: %+v", e)
			}
		})
	}
}

// TestOpenAIErrorsNeverHoldTheEnvironmentKey: the key the SDK takes from
// OPENAI_API_KEY, when none is configured, is scrubbed too. (t.Setenv: not
// parallel.)
func TestOpenAIErrorsNeverHoldTheEnvironmentKey(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", secretKey)
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+secretKey+`","code":"invalid_api_key"}}`)
	}))
	m := keyedModel(t, srv, "/v1", "")
	_, err := m.Stream(t.Context(), user("hi"), nil)
	e := asError(t, err)
	if got, _ := auth.Load().(string); got != "Bearer "+secretKey {
		t.Fatalf("the SDK sent Authorization %q, not the environment's key", got)
	}
	if e.Kind != llm.KindAuth || strings.Contains(err.Error(), secretKey) || e.Message != "Incorrect API key provided: [redacted]" {
		t.Fatalf("error = %+v (%v)", e, err)
	}
}
