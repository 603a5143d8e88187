package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// Codes of the schedules' routes.
const (
	CodeScheduleNotFound = "schedule_not_found" // 404: no such schedule for this tenant
	CodeScheduleExists   = "schedule_exists"    // 409: POST /schedules with a name the tenant's schedules use
)

// Paging of the schedules' lists.
const (
	defaultScheduleLimit = 20
	maxScheduleLimit     = 100
	cursorSchedules      = "schedules:"
	cursorScheduleRuns   = "schedule_runs:"
)

var errScheduleNotFound = newError(http.StatusNotFound, CodeScheduleNotFound, "Schedule not found",
	"the tenant has no schedule with this id")

// scheduleRequest is the body of POST /schedules and PATCH
// /schedules/{id}. Pointers tell an absent field from a zero one.
type scheduleRequest struct {
	Name     *string         `json:"name"`
	Cron     *string         `json:"cron"`
	Timezone *string         `json:"timezone"`
	Run      json.RawMessage `json:"run"`
	Overlap  *string         `json:"overlap"`
	CatchUp  *string         `json:"catch_up"`
	Paused   *bool           `json:"paused"`
}

// scheduleBody reads and decodes the body of a schedule's route.
func (s *server) scheduleBody(w http.ResponseWriter, r *http.Request) (scheduleRequest, error) {
	var req scheduleRequest
	body, err := s.readBody(w, r)
	if err != nil {
		return req, err
	}
	if err := checkText(body); err != nil {
		return req, err
	}
	return req, decodeStrict(body, &req, "")
}

// scheduleCreate answers POST /schedules: 201 and the new schedule.
func (s *server) scheduleCreate(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	req, err := s.scheduleBody(w, r)
	if err != nil {
		return err
	}
	name, err := nameOf("schedule", "", req.Name)
	if err != nil {
		return err
	}
	if req.Cron == nil {
		return fieldError("cron", "is required: 5 fields (minute hour day month weekday) or @every <duration>")
	}
	sc := agentd.Schedule{ID: agentd.NewID(), TenantID: TenantFromContext(ctx), Name: name, CreatedBy: ActorFromContext(ctx),
		Cron: strings.TrimSpace(*req.Cron), Timezone: "UTC"}
	if req.Timezone != nil {
		sc.Timezone = *req.Timezone
	}
	if sc.Overlap, err = oneOf("overlap", req.Overlap, agentd.ScheduleOverlaps()); err != nil {
		return err
	}
	if sc.CatchUp, err = oneOf("catch_up", req.CatchUp, agentd.ScheduleCatchUps()); err != nil {
		return err
	}
	if sc.NextAt, err = nextSlot(sc.Cron, sc.Timezone, time.Now()); err != nil {
		return err
	}
	if sc.Run, err = s.runTemplate(ctx, req.Run); err != nil {
		return err
	}
	sc.Paused = req.Paused != nil && *req.Paused
	out, err := s.store.ScheduleCreate(ctx, sc)
	if errors.Is(err, agentd.ErrScheduleExists) {
		return newError(http.StatusConflict, CodeScheduleExists, "Schedule exists",
			fmt.Sprintf("the tenant has a schedule named %q: PATCH /schedules/{id} changes it", name))
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/schedules/"+out.ID)
	s.writeJSON(w, r, http.StatusCreated, out.View())
	return nil
}

// nextSlot checks a schedule's timing and returns its first slot after
// now.
func nextSlot(expr, timezone string, now time.Time) (time.Time, error) {
	t, err := agentd.ParseTiming(expr, timezone)
	var te *agentd.TimingError
	if errors.As(err, &te) {
		return time.Time{}, fieldError(te.Field, "%s", te.Message)
	}
	if err != nil {
		return time.Time{}, err
	}
	next := t.Next(now)
	if next.IsZero() {
		return next, fieldError("cron", "has no slot to come")
	}
	return next, nil
}

// runTemplate checks a schedule's run template, a body of POST /runs,
// as POST /runs checks one (a problem names its field under run.), and
// returns it compacted. A template may not stream: no client is there.
func (s *server) runTemplate(ctx context.Context, raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, fieldError("run", "is required: the body of POST /runs that each slot starts")
	}
	if t := bytes.TrimSpace(raw); t[0] != '{' {
		return nil, fieldError("run", "must be an object: the body of POST /runs that each slot starts")
	}
	var req createRunRequest
	if err := decodeStrict(raw, &req, "run"); err != nil {
		return nil, err
	}
	if req.Stream != nil && *req.Stream {
		return nil, fieldError("run.stream", "must not be true: a schedule's runs have no client to stream to")
	}
	if !isNull(req.Webhook) {
		// A template is shown as it was given: it may hold no secret. The
		// tenant's subscriptions (POST /webhooks) get its runs' ends.
		return nil, fieldError("run.webhook", "is not taken in a schedule's run: subscribe a URL with POST /webhooks instead")
	}
	rc, _, err := s.runSpec(ctx, req)
	if err != nil {
		return nil, underRun(err)
	}
	if id := rc.Spec.ConversationID; id != "" {
		if _, err := s.store.ConversationGet(ctx, TenantFromContext(ctx), id); errors.Is(err, agentd.ErrConversationNotFound) {
			return nil, fieldError("run.conversation_id", "names no conversation of the tenant")
		} else if err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fieldError("run", "must be a JSON object")
	}
	return buf.Bytes(), nil
}

// underRun names the field of a problem of a run template under "run.".
func underRun(err error) error {
	var (
		ae          *apiError
		fe          *runspec.FieldError
		unknownTool *runspec.UnknownToolError
	)
	switch {
	case errors.As(err, &ae) && ae.field != "":
		out := *ae
		out.field = "run." + ae.field
		if rest, ok := strings.CutPrefix(ae.detail, ae.field); ok {
			out.detail = out.field + rest
		}
		return &out
	case errors.As(err, &fe):
		return fieldError("run."+fe.Field, "%s", fe.Message)
	case errors.As(err, &unknownTool):
		e := newError(http.StatusUnprocessableEntity, CodeUnknownTool, "Unknown tool", unknownTool.Error())
		e.field, e.tool = "run.tools", unknownTool.Tool
		return e
	case errors.Is(err, agentd.ErrAgentNotFound):
		return fieldError("run.agent", "%s", err.Error())
	}
	return err
}

// scheduleID reads the {id} of the path; a malformed id names no schedule.
func scheduleID(r *http.Request) (string, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return "", errScheduleNotFound
	}
	return id.String(), nil
}

// scheduleProblem is errScheduleNotFound for a schedule that is not
// found, and err otherwise.
func scheduleProblem(err error) error {
	if errors.Is(err, agentd.ErrScheduleNotFound) {
		return errScheduleNotFound
	}
	return err
}

func (s *server) scheduleGet(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	sc, err := s.store.ScheduleGet(r.Context(), TenantFromContext(r.Context()), id)
	if err != nil {
		return scheduleProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, sc.View())
	return nil
}

// scheduleList answers GET /schedules: the tenant's schedules by name, a
// page at a time.
func (s *server) scheduleList(w http.ResponseWriter, r *http.Request) error {
	limit, after, err := pageParams(r.URL.Query(), cursorSchedules, defaultScheduleLimit, maxScheduleLimit)
	if err != nil {
		return err
	}
	list, err := s.store.ScheduleList(r.Context(), TenantFromContext(r.Context()), after, limit+1)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(list, limit, agentd.Schedule.View,
		func(sc agentd.Schedule) string { return encodeCursor(cursorSchedules, sc.Name) }))
	return nil
}

// scheduleUpdate answers PATCH /schedules/{id}: pause ("paused": true),
// resume (false: the failures are forgotten, and the next slot is the
// first from now), or change the timing, run template or policies.
func (s *server) scheduleUpdate(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	req, err := s.scheduleBody(w, r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	var run json.RawMessage
	if req.Run != nil {
		if run, err = s.runTemplate(ctx, req.Run); err != nil {
			return err
		}
	}
	sc, err := s.store.ScheduleUpdate(ctx, TenantFromContext(ctx), id, func(sc *agentd.Schedule) error {
		return applyChange(sc, req, run, time.Now())
	})
	if err != nil {
		return scheduleProblem(err)
	}
	s.writeJSON(w, r, http.StatusOK, sc.View())
	return nil
}

// applyChange applies a PATCH's body to sc (run: its run template, checked).
func applyChange(sc *agentd.Schedule, req scheduleRequest, run json.RawMessage, now time.Time) error {
	if req.Name != nil && *req.Name != sc.Name {
		return fieldError("name", "cannot be changed: create a schedule of the new name, and delete this one")
	}
	retime := false
	if req.Cron != nil {
		sc.Cron, retime = strings.TrimSpace(*req.Cron), true
	}
	if req.Timezone != nil {
		sc.Timezone, retime = *req.Timezone, true
	}
	if run != nil {
		sc.Run = run
	}
	var err error
	if req.Overlap != nil {
		if sc.Overlap, err = oneOf("overlap", req.Overlap, agentd.ScheduleOverlaps()); err != nil {
			return err
		}
	}
	if req.CatchUp != nil {
		if sc.CatchUp, err = oneOf("catch_up", req.CatchUp, agentd.ScheduleCatchUps()); err != nil {
			return err
		}
	}
	if p := req.Paused; p != nil && *p != sc.Paused {
		sc.Paused, sc.PausedReason = *p, ""
		if !*p {
			sc.ConsecutiveFailures, retime = 0, true
		}
	}
	if retime {
		if sc.NextAt, err = nextSlot(sc.Cron, sc.Timezone, now); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) scheduleDelete(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	if err := s.store.ScheduleDelete(r.Context(), TenantFromContext(r.Context()), id); err != nil {
		return scheduleProblem(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// scheduleRuns answers GET /schedules/{id}/runs: the runs its slots
// started, the newest slot first, a page at a time.
func (s *server) scheduleRuns(w http.ResponseWriter, r *http.Request) error {
	id, err := scheduleID(r)
	if err != nil {
		return err
	}
	limit, pos, err := pageParams(r.URL.Query(), cursorScheduleRuns, defaultScheduleLimit, maxScheduleLimit)
	if err != nil {
		return err
	}
	var before *time.Time
	if pos != "" {
		t, err := time.Parse(time.RFC3339Nano, pos)
		if err != nil {
			return errBadCursor
		}
		before = &t
	}
	runs, err := s.store.ScheduleRuns(r.Context(), TenantFromContext(r.Context()), id, before, limit+1)
	if err != nil {
		return scheduleProblem(err)
	}
	pg := page(runs, limit, runView, func(r agentd.Run) string {
		var slot time.Time
		if sc := r.Params.Schedule; sc != nil {
			slot = sc.Slot
		}
		return encodeCursor(cursorScheduleRuns, slot.UTC().Format(time.RFC3339Nano))
	})
	if err := s.pageCosts(r.Context(), &pg); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, pg)
	return nil
}
