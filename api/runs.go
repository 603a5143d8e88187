package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

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
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	var req createRunRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	spec, stream, err := s.runSpec(req)
	if err != nil {
		return err
	}
	if stream && s.events == nil {
		return errStreamingUnavailable
	}
	if stream {
		done, ok := s.limits.openStream(tenant)
		if !ok {
			return errTooManyStreams(w)
		}
		defer done()
	}
	var fp string
	if key != "" {
		if fp, err = fingerprint(tenant, "POST /runs", body); err != nil {
			return err
		}
	}
	p := newRun(ctx, spec, key, fp)
	run, created, err := s.create(w, ctx, p)
	if err != nil {
		return err
	}
	s.known.add(tenant, run.ID)
	w.Header().Set("Location", "/runs/"+run.ID)
	if !created {
		w.Header().Set(HeaderIdempotentReplayed, "true")
	}
	if stream {
		return s.streamRun(w, r, run)
	}
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK
	}
	s.writeJSON(w, r, status, runView(run))
	return nil
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
	s.writeJSON(w, r, http.StatusOK, runView(run))
	return nil
}

// runList answers GET /runs: the tenant's runs, newest first, a page at a
// time.
func (s *server) runList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := agentd.RunListParams{TenantID: TenantFromContext(r.Context())}
	if v := q.Get("conversation_id"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return fieldError("conversation_id", "must be a UUID")
		}
		p.ConversationID = id.String()
	}
	if v := q.Get("status"); v != "" {
		if !slices.Contains(agentd.RunStatuses(), agentd.RunStatus(v)) {
			return fieldError("status", "must be one of %v, not %q", agentd.RunStatuses(), v)
		}
		p.Status = agentd.RunStatus(v)
	}
	limit, err := intParam(q, "limit", defaultRunLimit, 1, maxRunLimit)
	if err != nil {
		return err
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
	runs, err := s.store.RunList(r.Context(), p)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(runs, limit, runView,
		func(r agentd.Run) string { return encodeCursor(cursorRuns, r.ID) }))
	return nil
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
// refused then.
func (s *server) create(w http.ResponseWriter, ctx context.Context, p agentd.RunCreate) (agentd.Run, bool, error) {
	run, created, err := s.runs.Create(ctx, p)
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
// and If-None-Match work; ETag and Repr-Digest carry its SHA-256.
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
	http.ServeContent(w, r, "", a.CreatedAt, bytes.NewReader(a.Content))
	return nil
}

func (s *server) runCancel(w http.ResponseWriter, r *http.Request) error {
	return s.runChange(w, r, s.runs.Cancel)
}

func (s *server) runResume(w http.ResponseWriter, r *http.Request) error {
	return s.runChange(w, r, s.runs.Resume)
}

// runChange applies a cancel or a resume and answers with the run.
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
	s.writeJSON(w, r, http.StatusOK, runView(run))
	return nil
}
