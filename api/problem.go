package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/stream"
)

// Codes are the stable values of a problem's "code" member. Clients branch on
// them; the titles and details are for people and may change.
const (
	CodeInvalidJSON            = "invalid_json"             // 400: the body is not one JSON value
	CodeInvalidField           = "invalid_field"            // 422: a field, parameter or header is wrong; "field" names it
	CodeUnknownParameter       = "unknown_parameter"        // 400: a query parameter the route does not take; "field" names it
	CodeInvalidValue           = "invalid_value"            // 422: the database refused a value of the request as data
	CodeBodyTooLarge           = "body_too_large"           // 413
	CodeBodyTimeout            = "body_timeout"             // 408: the body did not arrive within the server's body timeout
	CodeUnsupportedMediaType   = "unsupported_media_type"   // 415: a body that is not declared application/json
	CodeNotFound               = "not_found"                // 404: no such route
	CodeRunNotFound            = "run_not_found"            // 404: no such run for this tenant
	CodeConversationNotFound   = "conversation_not_found"   // 404: no such conversation for this tenant
	CodeArtifactNotFound       = "artifact_not_found"       // 404: no such artifact of this run
	CodeUnknownTool            = "unknown_tool"             // 422: "tools" names a tool that is not registered; "tool" names it
	CodeConversationBusy       = "conversation_busy"        // 409: "busy_run_id" is the run in the way
	CodeIdempotencyKeyReused   = "idempotency_key_reused"   // 422: the key was used for another request
	CodeRunFinished            = "run_finished"             // 409: cancel of a run that already ended
	CodeRunCompleted           = "run_completed"            // 409: resume of a completed run
	CodeRunEnded               = "run_ended"                // 409: input to a run that ended; its conversation's door takes it ("conversation_id")
	CodeRunNotWaiting          = "run_not_waiting"          // 409: an action for a run that is not requires_action
	CodeActionMismatch         = "action_mismatch"          // 409: the run waits for an action about another tool call
	CodeMethodNotAllowed       = "method_not_allowed"       // 405
	CodeStreamingUnavailable   = "streaming_unavailable"    // 501: "stream": true without a stream hook
	CodeNotReady               = "not_ready"                // 503: GET /readyz when a dependency is down
	CodeShuttingDown           = "shutting_down"            // 503: GET /readyz, or a new event stream, while the instance shuts down
	CodeServerBusy             = "server_busy"              // 503: the bodies of the requests in flight fill the instance's memory budget; Retry-After says when to retry
	CodeInternal               = "internal"                 // 500: logged on the server, never detailed
	CodeUnauthorized           = "unauthorized"             // 401: no credential; WWW-Authenticate says how to send one
	CodeInvalidCredential      = "invalid_credential"       // 401: an unknown, revoked, expired or malformed credential
	CodeInsufficientScope      = "insufficient_scope"       // 403: the credential lacks the route's scope
	CodeTenantNotAllowed       = "tenant_not_allowed"       // 403: X-Tenant-ID from a credential without the admin scope
	CodeAuthUnavailable        = "auth_unavailable"         // 503: credentials cannot be checked now
	CodeRateLimited            = "rate_limited"             // 429: the tenant's rate or stream quota; Retry-After says when to retry
	CodeQuotaExceeded          = "quota_exceeded"           // 429: the tenant's runs in progress, with on_quota: reject
	CodeDatabaseUnavailable    = "database_unavailable"     // 503: the database cannot serve the request now; Retry-After says when to retry
	CodeAgentNotFound          = "agent_not_found"          // 404: no such agent (or version of it) for this tenant
	CodeAgentExists            = "agent_exists"             // 409: POST /agents with a name the tenant uses
	CodeToolNotFound           = "tool_not_found"           // 404: no such tool of this tenant's
	CodeToolExists             = "tool_exists"              // 409: POST /tools with a name the tenant's tools use
	CodeTenantToolsUnavailable = "tenant_tools_unavailable" // 501: the server keeps no tools of tenants
)

// typeBase prefixes a problem's "type" URI; the code follows it.
const typeBase = "https://agentd.dev/problems/"

// problem is an RFC 9457 problem details body, with agentd's "code" and a
// few optional extension members.
type problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Code      string `json:"code"`
	Instance  string `json:"instance,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	Field     string `json:"field,omitempty"`
	Tool      string `json:"tool,omitempty"`
	// Limit names the limit a write would pass (memory_limit).
	Limit     string `json:"limit,omitempty"`
	BusyRunID string `json:"busy_run_id,omitempty"`
	// ConversationID names the conversation whose door takes input for a
	// run that ended (run_ended).
	ConversationID string `json:"conversation_id,omitempty"`

	retryAfter time.Duration // > 0: sent as Retry-After
}

// apiError is an error that is already a problem: a handler's verdict on the
// request.
type apiError struct {
	status int
	code   string
	title  string
	detail string
	field  string
	tool   string
	limit  string
	// retryAfter, when set, is sent as Retry-After: the client may retry
	// the same request then.
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.code + ": " + e.detail }

func newError(status int, code, title, detail string) *apiError {
	return &apiError{status: status, code: code, title: title, detail: detail}
}

// fieldError says that one field of the request is wrong.
func fieldError(field, format string, args ...any) *apiError {
	e := newError(http.StatusUnprocessableEntity, CodeInvalidField, "Invalid field",
		field+": "+fmt.Sprintf(format, args...))
	e.field = field
	return e
}

var errRunNotFound = newError(http.StatusNotFound, CodeRunNotFound, "Run not found", "no run with this id")

var errConversationNotFound = newError(http.StatusNotFound, CodeConversationNotFound, "Conversation not found",
	"no conversation with this id")

var errKeyReused = newError(http.StatusUnprocessableEntity, CodeIdempotencyKeyReused, "Idempotency key reused",
	"this Idempotency-Key was already used with a different request")

// unavailableRetryAfter is the Retry-After of database_unavailable: a
// restart or a failover of PostgreSQL lasts seconds to a minute, and a
// client that retries every few seconds gets through soon after it ends.
const unavailableRetryAfter = 3 * time.Second

// errDatabaseUnavailable answers a request that needed the database while
// it could not serve it (agentd.ErrUnavailable). Nothing of a write was
// committed (a creation that may have is found by its Idempotency-Key), so
// the same request may be sent again.
var errDatabaseUnavailable = &apiError{status: http.StatusServiceUnavailable, code: CodeDatabaseUnavailable,
	title: "Database unavailable", retryAfter: unavailableRetryAfter,
	detail: "the database cannot serve this request now (it is restarting or failing over); retry after Retry-After seconds, " +
		"with the same Idempotency-Key for a creation"}

var errShuttingDown = newError(http.StatusServiceUnavailable, CodeShuttingDown, "Shutting down",
	"this instance is shutting down; retry, on another instance if there is one")

// problemFor maps any error a handler returns to the problem the client
// sees. It is the only place that does, and it looks at errors only with
// errors.Is and errors.As. internal is true for an error the client is not
// told about, which the caller logs.
func problemFor(err error) (p problem, internal bool) {
	var (
		ae          *apiError
		field       *runspec.FieldError
		unknownTool *runspec.UnknownToolError
		busy        *agentd.BusyError
		ended       *agentd.RunEndedError
		decision    *agentd.DecisionError
		pending     *agentd.PendingCallsError
		tooLarge    *http.MaxBytesError
	)
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &field):
		ae = fieldError(field.Field, "%s", field.Message)
	case errors.As(err, &unknownTool):
		ae = newError(http.StatusUnprocessableEntity, CodeUnknownTool, "Unknown tool", unknownTool.Error())
		ae.field, ae.tool = "tools", unknownTool.Tool
	case errors.As(err, &tooLarge):
		ae = newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "Body too large",
			fmt.Sprintf("the request body exceeds %d bytes", tooLarge.Limit))
	case errors.As(err, &busy):
		p := newProblem(newError(http.StatusConflict, CodeConversationBusy, "Conversation busy",
			"the conversation has a run in flight; retry when it ends, or send if_busy: enqueue or interrupt"))
		p.BusyRunID = busy.RunID
		return p, false
	case errors.As(err, &ended):
		p := newProblem(newError(http.StatusConflict, CodeRunEnded, "Run ended", fmt.Sprintf(
			"the run has ended (%s): send the message to its conversation with POST /conversations/%s/messages, "+
				"which starts the conversation's next run", ended.Status, ended.ConversationID)))
		p.ConversationID = ended.ConversationID
		return p, false
	case errors.Is(err, agentd.ErrInputsChanged):
		ae = newError(http.StatusConflict, CodeConversationBusy, "Conversation busy",
			"the conversation's runs changed while the message was sent; send it again")
	case errors.As(err, &pending):
		ae = fieldError("input", "%s", pending.Error())
	case errors.As(err, &decision):
		ae = fieldError("decision", "does not answer what the run asks (%s): approve or reject an approval; result, retry or fail an unknown outcome; "+
			"type tool_outputs for client tool calls", decision.Asks)
		if decision.Decision == agentd.DecisionOutputs {
			ae.field = "type"
		}
	case errors.Is(err, agentd.ErrIdempotencyMismatch):
		ae = errKeyReused
	case errors.Is(err, agentd.ErrRunNotFound):
		ae = errRunNotFound
	case errors.Is(err, agentd.ErrConversationNotFound):
		ae = errConversationNotFound
	case errors.Is(err, agentd.ErrArtifactNotFound):
		ae = newError(http.StatusNotFound, CodeArtifactNotFound, "Artifact not found", "no artifact with this id in this run")
	case errors.Is(err, agentd.ErrConversationBusy):
		ae = newError(http.StatusConflict, CodeConversationBusy, "Conversation busy",
			"the conversation has a run in progress; cancel it, or wait for it to end, then delete")
	case errors.Is(err, agentd.ErrRunFinished):
		ae = newError(http.StatusConflict, CodeRunFinished, "Run finished", "the run has already finished")
	case errors.Is(err, agentd.ErrRunCompleted):
		ae = newError(http.StatusConflict, CodeRunCompleted, "Run completed", "a completed run cannot be resumed")
	case errors.Is(err, agentd.ErrRunNotWaiting):
		ae = newError(http.StatusConflict, CodeRunNotWaiting, "Run not waiting", "the run is not waiting for an action")
	case errors.Is(err, agentd.ErrOutputsMismatch):
		ae = fieldError("outputs", "must answer each of the run's required_action.calls, once, and nothing else")
	case errors.Is(err, agentd.ErrActionMismatch):
		ae = newError(http.StatusConflict, CodeActionMismatch, "Action mismatch",
			"the run waits for an action about another tool call; see its required_action")
	case errors.Is(err, agentd.ErrInvalidValue):
		ae = newError(http.StatusUnprocessableEntity, CodeInvalidValue, "Invalid value",
			"a value of the request cannot be stored: send valid UTF-8 without NUL characters, and numbers that fit a float64")
	case errors.Is(err, stream.ErrStopped):
		ae = errShuttingDown
	case errors.Is(err, agentd.ErrUnavailable):
		// Not an internal error: the store logs the outage once, as it
		// begins and ends, rather than each request it refuses.
		ae = errDatabaseUnavailable
	default:
		return newProblem(newError(http.StatusInternalServerError, CodeInternal, "Internal error",
			"the server could not answer; the error is logged with this request's id")), true
	}
	return newProblem(ae), false
}

func newProblem(e *apiError) problem {
	return problem{
		Type:   typeBase + e.code,
		Title:  e.title,
		Status: e.status,
		Detail: e.detail,
		Code:   e.code,
		Field:  e.field,
		Tool:   e.tool,
		Limit:  e.limit,

		retryAfter: e.retryAfter,
	}
}

// StatusClientClosed is the status recorded for a request whose client
// went away before its answer (nginx's 499): it is never sent.
const StatusClientClosed = 499

// fail answers r with the problem for err, logging internal errors once.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	p, internal := problemFor(err)
	if internal && r.Context().Err() != nil {
		// The client went away (a wait it hung up on, a read it left):
		// nobody reads the answer and nothing failed. The status is a
		// client close's, which the access log and the metrics record.
		s.log.DebugContext(r.Context(), "request cancelled by client", slog.String("error", err.Error()),
			slog.String("request_id", requestIDFrom(r.Context())))
		w.WriteHeader(StatusClientClosed)
		return
	}
	if internal {
		s.metrics.internalErrors.Inc()
		s.log.ErrorContext(r.Context(), "internal error", slog.String("error", err.Error()),
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.String("request_id", requestIDFrom(r.Context())))
	}
	s.writeProblem(w, r, p)
}

// writeProblem writes p as application/problem+json; under /v1/, as
// OpenAI's API writes its errors (openAIProblem), which its SDKs read.
func (s *server) writeProblem(w http.ResponseWriter, r *http.Request, p problem) {
	p.Instance = r.URL.Path
	p.RequestID = requestIDFrom(r.Context())
	w.Header().Set("Cache-Control", "no-store")
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(p.retryAfter.Seconds()))))
	}
	if strings.HasPrefix(r.URL.Path, v1Prefix) {
		status, body := openAIProblem(p)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON writes v as JSON with status.
func (s *server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.fail(w, r, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// handle adapts a handler that returns an error.
func (s *server) handle(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	}
}
