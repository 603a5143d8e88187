package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/responses"
	"github.com/agentd/agentd/internal/stream"
)

// OpenAI's WebSocket mode of the Responses API on GET /v1/responses: a
// client sends response.create (the body of POST /v1/responses, streamed),
// response.steer (input for a response under way) and agentd's
// response.retrieve (a response's stream again, after starting_after); the
// server sends the stream events of POST /v1/responses with stream: true,
// one JSON object per text frame. Responses with the same stream_id (a
// lane; none is a lane too) are served one after another, in the order
// asked; lanes run side by side. See docs/responses.md, "WebSocket mode".

// Error codes of the WebSocket mode.
const (
	CodeUpgradeRequired = "upgrade_required" // 426: GET /v1/responses without a WebSocket upgrade
	// CodePreviousResponseNotFound is OpenAI's code, over a socket, for a
	// previous_response_id that names no response of the tenant's that is
	// kept (one that was not stored is gone once it answered).
	CodePreviousResponseNotFound = "previous_response_not_found" // 400
)

// The socket's bounds.
const (
	wsPingEvery    = 30 * time.Second // how often the server pings
	wsPingTimeout  = 15 * time.Second // how long a pong may take before the socket is closed
	wsDrainEvery   = 2 * time.Second  // how often a socket asks whether the instance drains
	wsWriteTimeout = 15 * time.Second // how long one frame may take to go out
	wsMaxLanes     = 16               // stream_ids with work at once, per socket
	wsLaneQueue    = 16               // requests waiting on one lane
)

// wsConn is one open socket. Its goroutines are the handler's (which
// reads), the pinger, and one per lane; all of them end with ctx, which
// ends when the socket closes, the client's credential stops holding, or
// the Hub stops, and the handler waits for them before it returns.
type wsConn struct {
	s      *server
	conn   *websocket.Conn
	r      *http.Request // the upgrade's: its context holds the tenant, the actor, the credential
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	lanes   map[string]*wsLane
	streams map[string]*wsStream // the responses this socket streams or streamed, by run id
}

// wsLane serves the requests of one stream_id in order.
type wsLane struct {
	id   string
	jobs chan wsJob
}

// wsJob is a request waiting on a lane: a response.create's body, or a
// response.retrieve.
type wsJob struct {
	create []byte // the create request, without type and stream_id
	resume *wsRetrieve
}

// wsStream is what the socket knows of a response it streamed: its lane,
// its encoder (the last event sent), and the steers it accepted for it.
type wsStream struct {
	lane   string
	enc    *responses.WSEncoder
	steers map[string]json.RawMessage // the input of each steer accepted here, by input id
}

// wsRetrieve is agentd's response.retrieve: the stream of a response of
// the tenant's after starting_after, on a lane, as GET
// /v1/responses/{id}?stream=true&starting_after=N serves it.
type wsRetrieve struct {
	Type          string `json:"type"`
	ResponseID    string `json:"response_id"`
	StartingAfter *int   `json:"starting_after"`
	StreamID      string `json:"stream_id"`
}

// wsSteer is OpenAI's response.steer.
type wsSteer struct {
	Type               string          `json:"type"`
	PreviousResponseID string          `json:"previous_response_id"`
	Input              json.RawMessage `json:"input"`
}

// responseSocket answers GET /v1/responses: the WebSocket of OpenAI's
// WebSocket mode, open until the client closes it (or stops answering
// pings), its credential stops holding, or the server stops streaming.
func (s *server) responseSocket(w http.ResponseWriter, r *http.Request) error {
	if s.events == nil {
		return errStreamingUnavailable
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return newError(http.StatusUpgradeRequired, CodeUpgradeRequired, "Upgrade required",
			"GET /v1/responses is the Responses API's WebSocket mode: open it as a WebSocket; POST /v1/responses creates a response over HTTP")
	}
	// checkOrigin let only a page of the server's own origin, or of one the
	// operator allowed, this far, as it does a change.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return nil // Accept answered the handshake
	}
	r, stop := s.whileAuthorized(r)
	defer stop()
	releaseBody(r.Context())
	conn.SetReadLimit(s.maxInputBody())
	ctx, cancel := context.WithCancelCause(r.Context())
	c := &wsConn{s: s, conn: conn, r: r, ctx: ctx, cancel: cancel, lanes: map[string]*wsLane{}, streams: map[string]*wsStream{}}
	c.wg.Add(1)
	go c.pinger()
	c.read()
	cancel(errSocketClosed)
	c.wg.Wait()
	_ = conn.Close(websocket.StatusNormalClosure, "") //nolint:errcheck // closed already, or the peer is gone
	return nil
}

// goAway closes the socket with 1001 (going away) as the instance stops
// serving streams: the close handshake, then the socket's goroutines end.
// The client reconnects, to another instance, and resumes its responses.
func (c *wsConn) goAway(cause error) {
	_ = c.conn.Close(websocket.StatusGoingAway, "the server is shutting down: reconnect and resume with starting_after") //nolint:errcheck // the peer may be gone
	c.cancel(cause)
}

var errSocketClosed = errors.New("socket closed")

// pinger pings the client every wsPingEvery; a ping not answered within
// wsPingTimeout closes the socket (its client is gone, or its network).
// Every wsDrainEvery it asks whether the instance has begun shutting down
// (Config.ReadyFunc says ErrDraining), which closes the socket too: the
// HTTP server's shutdown does not see a hijacked connection.
func (c *wsConn) pinger() {
	defer c.wg.Done()
	ping := time.NewTicker(wsPingEvery)
	defer ping.Stop()
	drain := time.NewTicker(wsDrainEvery)
	defer drain.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-drain.C:
			if c.draining() {
				c.goAway(ErrDraining)
				return
			}
			continue
		case <-ping.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, wsPingTimeout)
		err := c.conn.Ping(ctx)
		cancel()
		if err != nil {
			c.cancel(fmt.Errorf("ping: %w", err))
			return
		}
	}
}

// draining asks the ready check whether the instance drains, with a
// context that has ended already, so that it answers from its flags and
// asks nothing of the database (whose health is not the socket's
// concern).
func (c *wsConn) draining() bool {
	ctx, cancel := context.WithCancel(c.ctx)
	cancel()
	return errors.Is(c.s.ready(ctx), ErrDraining)
}

// read reads the client's messages until the socket closes, and answers
// or queues each. A message must arrive whole within the body timeout of
// its first frame.
func (c *wsConn) read() {
	for c.ctx.Err() == nil {
		typ, rd, err := c.conn.Reader(c.ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				c.cancel(err)
			}
			return
		}
		timer := time.AfterFunc(c.s.bodyTimeout, func() { c.cancel(errors.New("message timeout")) })
		msg, err := io.ReadAll(rd)
		timer.Stop()
		if err != nil {
			return // a message past the read limit closes the socket (1009), as OpenAI's does
		}
		if typ != websocket.MessageText {
			c.sendError("", fieldError("type", "a client message is a JSON object in a text frame"))
			continue
		}
		c.handle(msg)
	}
}

// handle answers one client message, or queues it on its lane.
func (c *wsConn) handle(msg []byte) {
	var env map[string]json.RawMessage
	if err := json.Unmarshal(msg, &env); err != nil {
		c.sendError("", newError(http.StatusBadRequest, CodeInvalidJSON, "Invalid JSON",
			"a client message must be one JSON object, such as {\"type\": \"response.create\", ...}"))
		return
	}
	var typ, lane string
	if raw, ok := env["stream_id"]; ok {
		if json.Unmarshal(raw, &lane) != nil || lane == "" || len(lane) > 256 {
			c.sendError("", fieldError("stream_id", "must be a non-empty string of at most 256 bytes"))
			return
		}
	}
	_ = json.Unmarshal(env["type"], &typ) //nolint:errcheck // a type that is no string is refused below
	switch typ {
	case "response.create":
		body, err := createBody(env)
		if err == nil {
			err = c.allowCreate()
		}
		if err != nil {
			c.sendError(lane, err)
			return
		}
		c.enqueue(lane, wsJob{create: body})
	case "response.steer":
		c.steer(msg)
	case "response.retrieve":
		var rq wsRetrieve
		if err := decodeStrict(msg, &rq, ""); err != nil {
			c.sendError(lane, err)
			return
		}
		c.enqueue(lane, wsJob{resume: &rq})
	default:
		c.sendError(lane, fieldError("type", "must be response.create, response.steer or response.retrieve, not %s", quoteOr(env["type"])))
	}
}

// quoteOr is raw as a message shows it: absent when there is none.
func quoteOr(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "absent"
	}
	if len(raw) > 64 {
		raw = append(raw[:61:61], "..."...)
	}
	return string(raw)
}

// createBody is the POST /v1/responses body of a response.create: the
// message without type and stream_id. stream is implicit (true, or
// absent); stream: false is refused, and so is generate: false (OpenAI's
// warm-up of a socket's state, which agentd has no need of).
func createBody(env map[string]json.RawMessage) ([]byte, error) {
	if raw, ok := env["stream"]; ok {
		var on *bool
		if json.Unmarshal(raw, &on) != nil || (on != nil && !*on) {
			return nil, fieldError("stream", "is implicit over a WebSocket: leave it out (or true)")
		}
	}
	if raw, ok := env["generate"]; ok {
		var on *bool
		if json.Unmarshal(raw, &on) != nil || (on != nil && !*on) {
			return nil, fieldError("generate", "false is not supported: agentd prepares no response without the model's output; leave it out (or true)")
		}
	}
	delete(env, "type")
	delete(env, "stream_id")
	delete(env, "stream")
	delete(env, "generate")
	return json.Marshal(env)
}

// enqueue queues job on lane, starting the lane's goroutine when it has
// none; a lane that is full, or one past wsMaxLanes, is refused.
func (c *wsConn) enqueue(lane string, job wsJob) {
	c.mu.Lock()
	l := c.lanes[lane]
	if l == nil && len(c.lanes) >= wsMaxLanes {
		c.mu.Unlock()
		c.sendError(lane, fieldError("stream_id", "this socket has %d lanes with work already: wait for one to finish", wsMaxLanes))
		return
	}
	if l == nil {
		l = &wsLane{id: lane, jobs: make(chan wsJob, wsLaneQueue)}
		c.lanes[lane] = l
		c.wg.Add(1)
		go c.serveLane(l)
	}
	select {
	case l.jobs <- job:
		c.mu.Unlock()
	default:
		c.mu.Unlock()
		c.sendError(lane, fieldError("stream_id", "%d requests wait on this lane already: wait for its responses to end", wsLaneQueue))
	}
}

// serveLane serves lane's jobs in order, and ends once it has none (it is
// started again by the next) or the socket ends.
func (c *wsConn) serveLane(l *wsLane) {
	defer c.wg.Done()
	defer c.recover()
	for {
		c.mu.Lock()
		var job wsJob
		select {
		case job = <-l.jobs:
		default:
			delete(c.lanes, l.id)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		if c.ctx.Err() != nil {
			return
		}
		if job.resume != nil {
			c.retrieve(l.id, *job.resume)
		} else {
			c.create(l.id, job.create)
		}
	}
}

// recover turns a panic of a lane into the socket's end, logged as the
// recoverer middleware logs a handler's: a lane runs outside the handler.
func (c *wsConn) recover() {
	if v := recover(); v != nil {
		c.s.metrics.internalErrors.Inc()
		c.s.log.ErrorContext(c.ctx, "panic in a WebSocket lane", slog.Any("panic", v), slog.String("stack", string(debug.Stack())),
			slog.String("request_id", requestIDFrom(c.r.Context())))
		c.cancel(fmt.Errorf("panic: %v", v))
	}
}

// create starts the response body asks for, as POST /v1/responses does,
// and streams it on the lane.
func (c *wsConn) create(lane string, body []byte) {
	ctx, err := c.msgContext(int64(len(body)))
	if err != nil {
		c.sendError(lane, err)
		return
	}
	if err := c.previousKept(ctx, body); err != nil {
		releaseBody(ctx)
		c.sendError(lane, err)
		return
	}
	st, err := c.s.responseStart(ctx, headerSink{}, body, "", true)
	releaseBody(ctx)
	if err != nil {
		c.sendError(lane, err)
		return
	}
	defer st.done()
	defer c.s.forgetUnstored(ctx, st.run)
	c.stream(lane, st.run, -1)
}

// previousKept refuses, with OpenAI's previous_response_not_found, a
// create whose previous_response_id names no kept response of the
// tenant's (also with store: false, which agentd refuses with a previous
// response that exists: see docs/responses.md).
func (c *wsConn) previousKept(ctx context.Context, body []byte) error {
	var probe struct {
		Prev *string `json:"previous_response_id"`
	}
	if json.Unmarshal(body, &probe) != nil || probe.Prev == nil {
		return nil // the decoder says what is wrong
	}
	runID, ok := responses.RunID(*probe.Prev)
	var err error
	if ok {
		_, err = c.s.storedRun(ctx, TenantFromContext(ctx), runID)
	}
	if !ok || errors.Is(err, agentd.ErrRunNotFound) {
		e := newError(http.StatusBadRequest, CodePreviousResponseNotFound, "Previous response not found",
			fmt.Sprintf("Previous response with id '%s' not found.", *probe.Prev))
		e.field = "previous_response_id"
		return e
	}
	return err
}

// retrieve streams a response of the tenant's after starting_after, as
// GET /v1/responses/{id}?stream=true does.
func (c *wsConn) retrieve(lane string, rq wsRetrieve) {
	after := -1
	if rq.StartingAfter != nil {
		if after = *rq.StartingAfter; after < 0 {
			c.sendError(lane, fieldError("starting_after", "must be a sequence number (0 or more)"))
			return
		}
	}
	runID, ok := responses.RunID(rq.ResponseID)
	if !ok {
		c.sendError(lane, v1NotFound("response_id", "Response", rq.ResponseID))
		return
	}
	run, err := c.s.storedRun(c.ctx, TenantFromContext(c.ctx), runID)
	if errors.Is(err, agentd.ErrRunNotFound) {
		err = v1NotFound("response_id", "Response", rq.ResponseID)
	}
	if err != nil {
		c.sendError(lane, err)
		return
	}
	done, err := c.s.streamSlot(headerSink{}, run.TenantID, true)
	if err != nil {
		c.sendError(lane, err)
		return
	}
	defer done()
	c.stream(lane, run, after)
}

// stream sends run's stream events after startingAfter on lane, until its
// last one, then what became of the steers the socket accepted for it. A
// socket that broke leaves the response going on (on_disconnect:
// continue).
func (c *wsConn) stream(lane string, run agentd.Run, startingAfter int) {
	enc := responses.NewWSEncoder(run, startingAfter, lane)
	c.mu.Lock()
	ws := c.streams[run.ID]
	if ws == nil {
		ws = &wsStream{steers: map[string]json.RawMessage{}}
		c.streams[run.ID] = ws
	}
	ws.lane, ws.enc = lane, enc
	c.mu.Unlock()
	fw := &wsFrames{c: c}
	_, err := c.s.events.StreamRunAs(fw, c.r.WithContext(c.ctx), run.ID, 0, enc)
	switch {
	case errors.Is(err, stream.ErrStopped):
		c.sendError(lane, err)
		c.goAway(err)
		return
	case errors.Is(err, agentd.ErrRunNotFound):
		err = v1NotFound("response_id", "Response", responses.ResponseID(run.ID))
	}
	if err != nil {
		c.sendError(lane, err)
		return
	}
	switch {
	case enc.Ended():
		c.steersEnded(run)
		c.mu.Lock()
		if ws.enc == enc && len(ws.steers) == 0 {
			delete(c.streams, run.ID) // nothing more to tell of it
		}
		c.mu.Unlock()
	case c.ctx.Err() == nil:
		c.sendError(lane, errStreamCut)
	}
}

// errStreamCut: a response's stream ended before the response did, and
// not because of the socket.
var errStreamCut = newError(http.StatusServiceUnavailable, CodeShuttingDown, "Stream ended",
	"the response's stream ended before the response did (this instance stops serving streams, or the response was deleted): "+
		"resume it with response.retrieve and starting_after, on this socket or another")

// msgContext is the socket's context for one message of size bytes,
// holding its share of the instance's body budget until releaseBody; a
// message the budget has no room for is refused (server_busy), as a body
// is over HTTP.
func (c *wsConn) msgContext(size int64) (context.Context, error) {
	h := &bodyHold{budget: c.s.bodies}
	if !h.reserve(bodyCost * size) {
		return nil, errServerBusy
	}
	return context.WithValue(c.ctx, bodyHoldKey{}, h), nil
}

// send writes one server event as a text frame.
func (c *wsConn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return // cannot happen: values of this file's types
	}
	c.frame(b)
}

// frame writes p as one text frame, within wsWriteTimeout; a frame that
// cannot go out ends the socket.
func (c *wsConn) frame(p []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, wsWriteTimeout)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, p); err != nil {
		c.cancel(fmt.Errorf("write: %w", err))
		return err
	}
	return nil
}

// wsError is OpenAI's error event of the WebSocket mode: the error of a
// request (its HTTP status, and the body POST /v1/responses answers),
// with the lane of the request it answers.
type wsError struct {
	Type     string          `json:"type"`
	Status   int             `json:"status"`
	Error    openAIErrorBody `json:"error"`
	StreamID string          `json:"stream_id,omitempty"`
}

// sendError sends err as an error event on lane; an internal error is
// logged once and told as such.
func (c *wsConn) sendError(lane string, err error) {
	p, internal := problemFor(err)
	if internal {
		if c.ctx.Err() != nil {
			return // the socket is closing: nobody reads it
		}
		c.s.metrics.internalErrors.Inc()
		c.s.log.ErrorContext(c.ctx, "internal error", slog.String("error", err.Error()),
			slog.String("path", c.r.URL.Path), slog.String("request_id", requestIDFrom(c.r.Context())))
	}
	status, body := openAIProblem(p)
	c.send(wsError{Type: "error", Status: status, Error: body.Error, StreamID: lane})
}

// headerSink takes the headers an error would have set on an HTTP answer
// (Retry-After), which a socket's error event has no room for.
type headerSink struct{}

func (headerSink) Header() http.Header         { return http.Header{} }
func (headerSink) Write(p []byte) (int, error) { return len(p), nil }
func (headerSink) WriteHeader(int)             {}

// wsFrames is the http.ResponseWriter a response's stream is written to
// (by the Hub, as it writes an SSE stream): each line its encoder
// (responses.WSEncoder) writes is one event, sent as a text frame.
type wsFrames struct {
	c       *wsConn
	pending []byte // a line not ended yet (an encoder writes whole lines)
	header  http.Header
}

func (f *wsFrames) Header() http.Header {
	if f.header == nil {
		f.header = http.Header{}
	}
	return f.header
}

func (f *wsFrames) WriteHeader(int) {}

// Write sends the whole lines of p, each as a frame.
func (f *wsFrames) Write(p []byte) (int, error) {
	f.pending = append(f.pending, p...)
	for {
		line, rest, ok := bytes.Cut(f.pending, []byte("\n"))
		if !ok {
			return len(p), nil
		}
		if len(line) > 0 {
			if err := f.c.frame(line); err != nil {
				return 0, err
			}
		}
		f.pending = rest
	}
}

// FlushError is a no-op: each frame goes out as it is written.
func (f *wsFrames) FlushError() error { return nil }

// SetWriteDeadline is a no-op: each frame has wsWriteTimeout.
func (f *wsFrames) SetWriteDeadline(time.Time) error { return nil }

// Steering codes of OpenAI's response.steer.failed.
const (
	steerNotFound  = "response_not_found"
	steerInvalid   = "invalid_input"
	steerTooMany   = "too_many_pending_steers"
	steerCompleted = "response_already_completed"
	steerNotActive = "response_not_active"
	// steerRateLimited is OpenAI's code of a 429, for a steer past the
	// tenant's creation rate.
	steerRateLimited = "rate_limit_exceeded"
)

// allowCreate applies the tenant's creation rate to a socket's
// response.create and response.steer, as limitCreates does to POST
// /v1/responses and POST /runs/{id}/input.
func (c *wsConn) allowCreate() error {
	ok, retry := c.s.limits.allowCreate(TenantFromContext(c.ctx), time.Now())
	if ok {
		return nil
	}
	return rateLimited(headerSink{}, retry, fmt.Sprintf("this tenant creates runs faster than its quota allows; retry in %d s",
		max(1, int(math.Ceil(retry.Seconds())))))
}

// wsSteerRef is the steering submission an event is about.
type wsSteerRef struct {
	ID                 string          `json:"id,omitempty"`
	PreviousResponseID string          `json:"previous_response_id"`
	Input              json.RawMessage `json:"input,omitempty"`
}

// wsSteerEvent is response.steer.accepted, and response.steer.failed with
// Error. Its sequence_number is that of the last event of the response
// the socket sent (-1: none): steering is not part of the response's
// stream, whose numbering its log fixes for every reader.
type wsSteerEvent struct {
	Type     string        `json:"type"`
	Seq      int           `json:"sequence_number"`
	Steer    wsSteerRef    `json:"steer"`
	Error    *wsSteerError `json:"error,omitempty"`
	StreamID string        `json:"stream_id,omitempty"`
}

type wsSteerError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param,omitempty"`
}

// steer answers a response.steer: the input is committed as the input of
// the response's run (POST /runs/{id}/input, when: next), then
// response.steer.accepted; or response.steer.failed, with the input.
func (c *wsConn) steer(msg []byte) {
	var sq wsSteer
	if err := decodeStrict(msg, &sq, ""); err != nil {
		c.steerFailed(sq, "", steerInvalid, err)
		return
	}
	runID, ok := responses.RunID(sq.PreviousResponseID)
	if !ok {
		c.steerFailed(sq, "", steerNotFound, v1NotFound("previous_response_id", "Response", sq.PreviousResponseID))
		return
	}
	msgs, text, err := responses.SteerInput(sq.Input)
	if err != nil {
		c.steerFailed(sq, "", steerInvalid, err)
		return
	}
	if err := c.allowCreate(); err != nil {
		c.steerFailed(sq, "", steerRateLimited, err)
		return
	}
	ctx, err := c.msgContext(int64(len(msg)))
	if err != nil {
		c.sendError("", err)
		return
	}
	defer releaseBody(ctx)
	run, err := c.s.store.RunGet(ctx, TenantFromContext(ctx), runID)
	c.mu.Lock()
	ws := c.streams[runID]
	c.mu.Unlock()
	if errors.Is(err, agentd.ErrRunNotFound) || (err == nil && run.Params.Unstored && ws == nil) {
		c.steerFailed(sq, "", steerNotFound, v1NotFound("previous_response_id", "Response", sq.PreviousResponseID))
		return
	}
	if err == nil && run.InputsPending >= MaxPendingInputs {
		c.steerFailed(sq, "", steerTooMany, fieldError("input", "the response holds %d steers pending already", MaxPendingInputs))
		return
	}
	var in agentd.RunInput
	if err == nil {
		in, _, err = c.s.accept(ctx, run, steering{msgs: msgs, text: text, when: agentd.InputNext})
	}
	var ended *agentd.RunEndedError
	switch p, internal := problemFor(err); {
	case err == nil:
	case errors.As(err, &ended):
		c.steerFailed(sq, "", steerCompleted, fieldError("previous_response_id", "the response has ended (%s): "+
			"send the input in a response.create with previous_response_id", responses.StatusOf(run)))
		return
	case !internal && p.Status < 500:
		c.steerFailed(sq, "", steerInvalid, err)
		return
	default:
		c.sendError("", err)
		return
	}
	c.steerAccepted(sq, in.ID)
}

// steerAccepted records the input of an accepted steer, and tells it.
func (c *wsConn) steerAccepted(sq wsSteer, inputID string) {
	runID, _ := responses.RunID(sq.PreviousResponseID)
	c.mu.Lock()
	ws := c.streams[runID]
	if ws == nil {
		ws = &wsStream{steers: map[string]json.RawMessage{}}
		c.streams[runID] = ws
	}
	ws.steers[inputID] = sq.Input
	ev := wsSteerEvent{Type: "response.steer.accepted", Seq: ws.last(), StreamID: ws.lane,
		Steer: wsSteerRef{ID: responses.SteerID(inputID), PreviousResponseID: sq.PreviousResponseID}}
	c.mu.Unlock()
	c.send(ev)
}

// last is the sequence_number of the last event of the response the
// socket sent, -1 for none.
func (ws *wsStream) last() int {
	if ws.enc == nil {
		return -1
	}
	return ws.enc.Last()
}

// steerFailed sends response.steer.failed for sq (inputID: the input it
// was accepted as, "" for none), with its input for the client to send
// again.
func (c *wsConn) steerFailed(sq wsSteer, inputID, code string, err error) {
	p, _ := problemFor(err)
	_, body := openAIProblem(p)
	ev := wsSteerEvent{Type: "response.steer.failed", Seq: -1,
		Steer: wsSteerRef{PreviousResponseID: sq.PreviousResponseID, Input: sq.Input},
		Error: &wsSteerError{Code: code, Message: body.Error.Message, Type: "invalid_request_error", Param: body.Error.Param}}
	if inputID != "" {
		ev.Steer.ID = responses.SteerID(inputID)
	}
	if runID, ok := responses.RunID(sq.PreviousResponseID); ok {
		c.mu.Lock()
		if ws := c.streams[runID]; ws != nil {
			ev.Seq, ev.StreamID = ws.last(), ws.lane
		}
		c.mu.Unlock()
	}
	c.send(ev)
}

// steersEnded tells, once run's response ended, of each steer the socket
// accepted for it that the run ended without: response.steer.failed
// (response_not_active), with its input, which the client may send in its
// next response.create.
func (c *wsConn) steersEnded(run agentd.Run) {
	c.mu.Lock()
	ws := c.streams[run.ID]
	n, lane := 0, ""
	if ws != nil {
		n, lane = len(ws.steers), ws.lane
	}
	c.mu.Unlock()
	if n == 0 {
		return
	}
	ins, err := c.s.store.InputList(c.ctx, run.ID, false)
	if err != nil {
		c.sendError(lane, err)
		return
	}
	for _, in := range ins {
		c.mu.Lock()
		input, ok := ws.steers[in.ID]
		if ok && in.Status != agentd.InputPending {
			delete(ws.steers, in.ID)
		}
		c.mu.Unlock()
		if !ok || in.Status != agentd.InputUnapplied {
			continue
		}
		c.steerFailed(wsSteer{PreviousResponseID: responses.ResponseID(run.ID), Input: input}, in.ID, steerNotActive,
			fieldError("previous_response_id", "the response ended (%s) before the input was applied", in.Reason))
	}
}
