package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/telemetry"
)

// Headers of POST /runs.
const (
	HeaderIdempotencyKey     = "Idempotency-Key"
	HeaderIdempotentReplayed = "Idempotent-Replayed"
)

// Paging of GET /runs.
const (
	defaultRunLimit = 20
	maxRunLimit     = 100
)

// runCreate answers POST /runs: 202 and the new run, or 200 and the first
// run for a repeated Idempotency-Key.
func (s *server) runCreate(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tenant := TenantFromContext(ctx)
	key := r.Header.Get(HeaderIdempotencyKey)
	if key != "" && !validKey(key) {
		return fieldError(HeaderIdempotencyKey, "must be 1 to %d printable ASCII characters", maxKeyLen)
	}
	body, err := s.readInputBody(w, r)
	if err != nil {
		return err
	}
	var req createRunRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	rc, stream, err := s.runSpec(ctx, req)
	if err != nil {
		return err
	}
	spec := rc.Spec
	hook, secret, err := s.runWebhook(ctx, "webhook", req.Webhook)
	if err != nil {
		return err
	}
	spec.Params.Webhook = hook
	done, err := s.streamSlot(w, tenant, stream)
	if err != nil {
		return err
	}
	defer done()
	var fp string
	if key != "" {
		if fp, err = fingerprint(tenant, "POST /runs", body); err != nil {
			return err
		}
	}
	wait, fromPrefer, err := s.waitOf(r)
	if err != nil {
		return err
	}
	return s.createAndAnswer(w, r, newRun(ctx, spec, key, fp), stream, wait, fromPrefer, secret)
}

// createAndAnswer creates a run (or finds the one of its idempotency key)
// and answers with it: its stream when stream is set, else 202 (200 for a
// replay) with the run. With a wait, it answers once the run settled (200)
// or the wait is over (202).
func (s *server) createAndAnswer(w http.ResponseWriter, r *http.Request, p agentd.RunCreate, stream bool,
	wait time.Duration, fromPrefer bool, webhookSecret string) error {
	if p.Spec.Params.IfBusy == agentd.IfBusySteer {
		if done, err := s.steerBusy(w, r, p); done || err != nil {
			return err
		}
	}
	run, created, err := s.create(w, r.Context(), p)
	var busy *agentd.BusyError
	if errors.As(err, &busy) && p.Spec.Params.IfBusy == agentd.IfBusySteer {
		// The conversation's door takes it from here: it steers the run
		// in flight, or starts the run again once none is.
		return s.steerBusyNow(w, r, p)
	}
	if err != nil {
		return err
	}
	if created && webhookSecret != "" {
		w.Header().Set(HeaderWebhookSecret, webhookSecret)
	}
	s.known.add(TenantFromContext(r.Context()), run.ID)
	w.Header().Set("Location", "/runs/"+run.ID)
	if !created {
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	if stream {
		return s.streamRun(w, r, run)
	}
	if wait > 0 {
		applied(w, wait, fromPrefer)
		run = s.waitRun(r.Context(), run, wait)
	}
	status := http.StatusAccepted
	if !created || (wait > 0 && s.answered(r.Context(), run)) {
		status = http.StatusOK
	}
	v := runView(run)
	if !created || wait > 0 { // a new run has made no model call yet
		if err := s.withCosts(r.Context(), &v); err != nil {
			return err
		}
	}
	s.writeJSON(w, r, status, v)
	return nil
}

// streamSlot takes one of the tenant's stream slots for a request that
// streams (nothing for one that does not); done gives it back.
func (s *server) streamSlot(w http.ResponseWriter, tenant string, stream bool) (done func(), err error) {
	if !stream {
		return func() {}, nil
	}
	if s.events == nil {
		return nil, errStreamingUnavailable
	}
	done, ok := s.limits.openStream(tenant)
	if !ok {
		return nil, errTooManyStreams(w)
	}
	return done, nil
}

// runID reads the {id} of the path; a malformed id names no run.
func runID(r *http.Request) (string, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return "", errRunNotFound
	}
	return id.String(), nil
}

// runFor reads the run named by the path, for the request's tenant.
func (s *server) runFor(r *http.Request) (agentd.Run, error) {
	id, err := runID(r)
	if err != nil {
		return agentd.Run{}, err
	}
	return s.store.RunGet(r.Context(), TenantFromContext(r.Context()), id)
}

func (s *server) runGet(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runFor(r)
	if err != nil {
		return err
	}
	wait, fromPrefer, err := s.waitOf(r)
	if err != nil {
		return err
	}
	if wait > 0 {
		applied(w, wait, fromPrefer)
		run = s.waitRun(r.Context(), run, wait)
	}
	v, err := s.viewWithChildren(r.Context(), run)
	if err == nil {
		err = s.withCosts(r.Context(), &v)
	}
	if err == nil {
		err = s.withInputs(r.Context(), run, &v)
	}
	if err == nil {
		err = s.withInputText(r.Context(), run, &v)
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, v)
	return nil
}

// runList answers GET /runs: the tenant's runs, newest first, a page at a
// time.
func (s *server) runList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := agentd.RunListParams{TenantID: TenantFromContext(r.Context())}
	var err error
	if p.ConversationID, err = uuidParam(q, "conversation_id"); err != nil {
		return err
	}
	if p.ParentRunID, err = uuidParam(q, "parent_run_id"); err != nil {
		return err
	}
	if p.ScheduleID, err = uuidParam(q, "schedule_id"); err != nil {
		return err
	}
	if v := q.Get("status"); v != "" {
		if !slices.Contains(agentd.RunStatuses(), agentd.RunStatus(v)) {
			return fieldError("status", "must be one of %v, not %q", agentd.RunStatuses(), v)
		}
		p.Status = agentd.RunStatus(v)
	}
	p.Agent = q.Get("agent")
	if p.Text = q.Get("q"); utf8.RuneCountInString(p.Text) > maxRunText {
		return fieldError("q", "must be at most %d characters, not %d", maxRunText, utf8.RuneCountInString(p.Text))
	}
	limit, err := intParam(q, "limit", defaultRunLimit, 1, maxRunLimit)
	if err != nil {
		return err
	}
	if q.Has("agent_version") {
		if p.Agent == "" {
			return fieldError("agent_version", "is taken only with agent")
		}
		if p.AgentVersion, err = intParam(q, "agent_version", 0, 1, 1<<30); err != nil {
			return err
		}
	}
	if v := q.Get("cursor"); v != "" {
		if p.Before, err = decodeCursor(v, cursorRuns); err != nil {
			return err
		}
		if _, err := uuid.Parse(p.Before); err != nil {
			return errBadCursor
		}
	}
	p.Limit = limit + 1 // one more tells whether there is a next page
	p.MayLag = true     // a listing may lag, as a read replica does
	runs, err := s.store.RunList(r.Context(), p)
	if err != nil {
		return err
	}
	pg := page(runs, limit, runView, func(r agentd.Run) string { return encodeCursor(cursorRuns, r.ID) })
	if err := s.pageCosts(r.Context(), &pg); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, pg)
	return nil
}

// maxRunText is the longest text GET /runs looks for in runs' input (q).
const maxRunText = 200

// withInputText puts the text of what run was asked into its view v.
func (s *server) withInputText(ctx context.Context, run agentd.Run, v *runJSON) error {
	text, err := s.store.RunInputText(ctx, run.ID)
	v.InputText = nilIfEmpty(text)
	return err
}

// uuidParam is the UUID of query parameter name, canonical ("": absent).
func uuidParam(q url.Values, name string) (string, error) {
	v := q.Get(name)
	if v == "" {
		return "", nil
	}
	id, err := uuid.Parse(v)
	if err != nil {
		return "", fieldError(name, "must be a UUID")
	}
	return id.String(), nil
}

// A cursor names its list, so that one list's cursor is refused by another.
const (
	cursorRuns          = "runs:"
	cursorMessages      = "messages:"
	cursorConversations = "conversations:"
)

var errBadCursor = fieldError("cursor", "is not a cursor this list gave: pass next_cursor as it came")

// encodeCursor makes the opaque cursor of list that follows position.
func encodeCursor(list, position string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(list + position))
}

// decodeCursor returns the position of a cursor of list.
func decodeCursor(c, list string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", errBadCursor
	}
	pos, ok := strings.CutPrefix(string(b), list)
	if !ok {
		return "", errBadCursor
	}
	return pos, nil
}

// intParam reads an optional integer query parameter within [lo, hi].
func intParam(q url.Values, name string, def, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fieldError(name, "must be an integer between %d and %d", lo, hi)
	}
	return n, nil
}

// newRun is the creation of a run of spec for the request of ctx: its
// tenant and actor are the credential's, its trace the request's, and key
// its idempotency key (optional) with fingerprint fp.
func newRun(ctx context.Context, spec agentd.RunSpec, key, fp string) agentd.RunCreate {
	spec.Params.TraceParent = telemetry.TraceParent(ctx)
	p := agentd.RunCreate{TenantID: TenantFromContext(ctx), Actor: ActorFromContext(ctx), Spec: spec}
	if key != "" {
		p.IdempotencyKey, p.RequestHash = key, fp
	}
	return p
}

// create creates a run, saying quota_exceeded (with Retry-After) when the
// tenant's runs in progress are at its quota and the run asked to be
// refused then. It gives back the request's share of the body budget.
func (s *server) create(w http.ResponseWriter, ctx context.Context, p agentd.RunCreate) (agentd.Run, bool, error) {
	var err error
	if p.Spec.Input, p.Hook, err = s.onInput(ctx, "", p.Spec.ConversationID, p.Spec.Input, p.IdempotencyKey); err != nil {
		return agentd.Run{}, false, err
	}
	run, created, err := s.runs.Create(ctx, p)
	releaseBody(ctx) // the request's body is decoded and stored: a stream or a wait that follows may last minutes
	if errors.Is(err, agentd.ErrQuotaExceeded) {
		w.Header().Set("Retry-After", "1")
		return run, false, newError(http.StatusTooManyRequests, CodeQuotaExceeded, "Quota exceeded",
			"this tenant has as many runs in progress as its quota allows; retry later, or send on_quota: queue")
	}
	return run, created, err
}

// stepsList answers GET /runs/{id}/steps: the run's steps with their tool
// calls and attempts.
func (s *server) stepsList(w http.ResponseWriter, r *http.Request) error {
	run, err := s.runFor(r)
	if err != nil {
		return err
	}
	steps, err := s.store.StepsList(r.Context(), run.ID)
	if err != nil {
		return err
	}
	out := listJSON[stepJSON]{Data: make([]stepJSON, 0, len(steps))}
	for _, st := range steps {
		out.Data = append(out.Data, stepView(st))
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}

// artifactGet answers GET /runs/{id}/artifacts/{artifact_id}: a tool result
// kept whole, as its tool returned it, with its media type. Range requests
// (see artifactRange) and If-None-Match work; ETag and Repr-Digest carry
// its SHA-256.
func (s *server) artifactGet(w http.ResponseWriter, r *http.Request) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	a, err := s.store.ArtifactGet(r.Context(), TenantFromContext(r.Context()), id, chi.URLParam(r, "artifact_id"))
	if err != nil {
		return err
	}
	sum, err := hex.DecodeString(a.SHA256)
	if err == nil {
		w.Header().Set("Repr-Digest", "sha-256=:"+base64.StdEncoding.EncodeToString(sum)+":")
	}
	w.Header().Set("Content-Type", a.MediaType)
	w.Header().Set("ETag", `"`+a.SHA256+`"`)
	w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if rh := r.Header.Get("Range"); rh != "" {
		if ranges := artifactRange(rh, int64(len(a.Content)), a.MediaType); ranges != rh {
			r = r.Clone(r.Context())
			r.Header.Set("Range", ranges)
			if ranges == "" {
				r.Header.Del("Range")
			}
		}
	}
	http.ServeContent(&rangeProblem{ResponseWriter: w, s: s, r: r}, r, "", a.CreatedAt, bytes.NewReader(a.Content))
	return nil
}

// CodeRangeNotSatisfiable: GET /runs/{id}/artifacts/{artifact_id} with a
// Range header of no satisfiable range; Content-Range gives the size.
const CodeRangeNotSatisfiable = "range_not_satisfiable"

// rangeProblem answers http.ServeContent's 416 as a problem rather than
// its text/plain line, keeping the Content-Range it set; every other
// answer passes through.
type rangeProblem struct {
	http.ResponseWriter
	s      *server
	r      *http.Request
	failed bool // the problem is written: what ServeContent writes is dropped
}

func (w *rangeProblem) WriteHeader(status int) {
	switch {
	case w.failed:
	case status == http.StatusRequestedRangeNotSatisfiable:
		w.failed = true
		w.s.fail(w.ResponseWriter, w.r, newError(status, CodeRangeNotSatisfiable, "Range not satisfiable",
			"the Range header asks for no byte of the artifact; Content-Range gives its size"))
	default:
		w.ResponseWriter.WriteHeader(status)
	}
}

func (w *rangeProblem) Write(p []byte) (int, error) {
	if w.failed {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *rangeProblem) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxRanges caps the ranges one Range header may ask of an artifact; past
// it the whole artifact is served (as Apache's MaxRanges does), so that a
// header of thousands of tiny ranges costs no more than the artifact.
const maxRanges = 100

// byteRange is a satisfiable range of an artifact: its first and last
// byte, and where the Range header asked for it (its parts go in that
// order).
type byteRange struct {
	first, last int64
	order       int
}

// artifactRange returns the Range header that http.ServeContent is to
// serve for an artifact of size bytes and media type ctype, in place of
// header, the client's (preconditions and If-Range stay ServeContent's,
// which applies them first):
//   - "" (the whole artifact, 200) for a range unit other than bytes, which
//     RFC 9110 says to ignore; for more than maxRanges ranges; for several
//     ranges whose multipart/byteranges answer would be no smaller than the
//     artifact; and for an empty artifact;
//   - a range past the end, which ServeContent answers 416 with
//     Content-Range: bytes */size, for a header of no satisfiable range: a
//     start past the end, a suffix of zero bytes (bytes=-0, which
//     ServeContent alone answers 206 with an empty range) or a malformed
//     range;
//   - otherwise the satisfiable ranges, overlapping and adjacent ones
//     merged, in the order they were asked.
func artifactRange(header string, size int64, ctype string) string {
	unit, set, ok := strings.Cut(header, "=")
	if !strings.EqualFold(textproto.TrimString(unit), "bytes") || size == 0 {
		return ""
	}
	unsatisfiable := "bytes=" + strconv.FormatInt(size, 10) + "-"
	if !ok {
		return unsatisfiable
	}
	var ranges []byteRange
	n := 0
	for spec := range strings.SplitSeq(set, ",") {
		spec = textproto.TrimString(spec)
		if spec == "" {
			continue
		}
		if n++; n > maxRanges {
			return ""
		}
		br, satisfiable, valid := parseByteRange(spec, size)
		switch {
		case !valid:
			return unsatisfiable
		case satisfiable:
			br.order = n
			ranges = append(ranges, br)
		}
	}
	if len(ranges) == 0 {
		return unsatisfiable
	}
	ranges = coalesce(ranges)
	if len(ranges) > 1 && multipartSize(ranges, ctype, size) >= size {
		return ""
	}
	specs := make([]string, len(ranges))
	for i, br := range ranges {
		specs[i] = strconv.FormatInt(br.first, 10) + "-" + strconv.FormatInt(br.last, 10)
	}
	return "bytes=" + strings.Join(specs, ",")
}

// parseByteRange reads one range-spec of a Range header (first-last,
// first- or -suffix) against an artifact of size bytes: the range it asks
// (its last byte cut to the end), whether it is satisfiable, and whether
// it is a range-spec at all.
func parseByteRange(spec string, size int64) (br byteRange, satisfiable, valid bool) {
	first, last, ok := strings.Cut(spec, "-")
	if !ok {
		return br, false, false
	}
	first, last = textproto.TrimString(first), textproto.TrimString(last)
	if first == "" {
		suffix, ok := rangeNumber(last)
		if !ok {
			return br, false, false
		}
		return byteRange{first: size - min(suffix, size), last: size - 1}, suffix > 0, true
	}
	f, ok := rangeNumber(first)
	if !ok {
		return br, false, false
	}
	l := int64(math.MaxInt64)
	if last != "" {
		if l, ok = rangeNumber(last); !ok || l < f {
			return br, false, false
		}
	}
	return byteRange{first: f, last: min(l, size-1)}, f < size, true
}

// rangeNumber reads the digits of a range-spec; a number past int64 is
// taken as the largest (past the end of any artifact).
func rangeNumber(s string) (int64, bool) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return math.MaxInt64, true
	}
	return n, true
}

// coalesce merges overlapping and adjacent ranges; each merged range
// keeps the earliest place of those it merged, and the result is in that
// order.
func coalesce(ranges []byteRange) []byteRange {
	slices.SortFunc(ranges, func(a, b byteRange) int { return cmp.Compare(a.first, b.first) })
	out := ranges[:1]
	for _, br := range ranges[1:] {
		cur := &out[len(out)-1]
		if br.first > cur.last+1 {
			out = append(out, br)
			continue
		}
		cur.last = max(cur.last, br.last)
		cur.order = min(cur.order, br.order)
	}
	slices.SortFunc(out, func(a, b byteRange) int { return cmp.Compare(a.order, b.order) })
	return out
}

// multipartSize is the size of the multipart/byteranges answer that
// http.ServeContent makes of ranges, as it counts it itself.
func multipartSize(ranges []byteRange, ctype string, size int64) int64 {
	var cw countingWriter
	mw := multipart.NewWriter(&cw)
	var n int64
	for _, br := range ranges {
		_, _ = mw.CreatePart(textproto.MIMEHeader{ // a countingWriter never fails
			"Content-Range": {"bytes " + strconv.FormatInt(br.first, 10) + "-" + strconv.FormatInt(br.last, 10) + "/" + strconv.FormatInt(size, 10)},
			"Content-Type":  {ctype},
		})
		n += br.last - br.first + 1
	}
	_ = mw.Close()
	return n + int64(cw)
}

// countingWriter counts the bytes written to it.
type countingWriter int64

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}

// cancelWait bounds how long POST /runs/{id}/cancel waits for a running
// run to stop: its executor, told at once on whichever instance, stops it
// within a second (docs/design.md), so the answer usually says how the run
// ended. It is under the two and a half seconds that a repeat of the
// request with its Idempotency-Key waits for the first answer.
const cancelWait = 2 * time.Second

// runCancel answers POST /runs/{id}/cancel with the run once the cancel
// has had its effect: 200 and the run as it ended (cancelled, or otherwise
// when it ended first), or 202 and the run still running, with its
// cancel_requested_at, when its executor has not stopped it within
// cancelWait.
func (s *server) runCancel(w http.ResponseWriter, r *http.Request) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	run, err := s.runs.Cancel(ctx, TenantFromContext(ctx), id, ActorFromContext(ctx))
	if err != nil {
		return err
	}
	run = s.awaitStop(ctx, run)
	status := http.StatusOK
	if run.Status == agentd.StatusRunning {
		status = http.StatusAccepted
	}
	v, err := s.costedView(ctx, run)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, status, v)
	return nil
}

// awaitStop reads a run flagged to stop again, at growing intervals, until
// it is no longer running or cancelWait has passed (or the client left),
// and returns it as last read. A failed read ends the wait with what was
// read before: the cancel itself is committed.
func (s *server) awaitStop(ctx context.Context, run agentd.Run) agentd.Run {
	ctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	for wait := 20 * time.Millisecond; run.Status == agentd.StatusRunning; wait = min(2*wait, 250*time.Millisecond) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return run
		case <-t.C:
		}
		got, err := s.store.RunGet(ctx, run.TenantID, run.ID)
		if err != nil {
			return run
		}
		run = got
	}
	return run
}

func (s *server) runResume(w http.ResponseWriter, r *http.Request) error {
	return s.runChange(w, r, s.runs.Resume)
}

// runChange applies a resume and answers with the run.
func (s *server) runChange(w http.ResponseWriter, r *http.Request,
	change func(ctx context.Context, tenantID, id, actor string) (agentd.Run, error)) error {
	id, err := runID(r)
	if err != nil {
		return err
	}
	run, err := change(r.Context(), TenantFromContext(r.Context()), id, ActorFromContext(r.Context()))
	if err != nil {
		return err
	}
	v, err := s.costedView(r.Context(), run)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, v)
	return nil
}
