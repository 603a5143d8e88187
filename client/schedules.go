package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentd/agentd"
)

// Schedule is a schedule as the server shows it (docs/schedules.md).
type Schedule = agentd.ScheduleView

// ScheduleDefinition is what POST /schedules sends: a name, a cron
// expression (5 fields, or @every 30s) in a time zone (empty: UTC), the
// body of POST /runs that each slot starts, and the overlap and catch-up
// policies (empty: skip).
type ScheduleDefinition struct {
	Name     string                 `json:"name"`
	Cron     string                 `json:"cron"`
	Timezone string                 `json:"timezone,omitempty"`
	Run      json.RawMessage        `json:"run"`
	Overlap  agentd.ScheduleOverlap `json:"overlap,omitempty"`
	CatchUp  agentd.ScheduleCatchUp `json:"catch_up,omitempty"`
	Paused   bool                   `json:"paused,omitempty"`
}

// ScheduleChange is what PATCH /schedules/{id} sends: each field that is
// set is changed.
type ScheduleChange struct {
	Paused   *bool                   `json:"paused,omitempty"`
	Cron     *string                 `json:"cron,omitempty"`
	Timezone *string                 `json:"timezone,omitempty"`
	Run      json.RawMessage         `json:"run,omitempty"`
	Overlap  *agentd.ScheduleOverlap `json:"overlap,omitempty"`
	CatchUp  *agentd.ScheduleCatchUp `json:"catch_up,omitempty"`
}

// CreateSchedule makes a schedule (POST /schedules).
func (c *Client) CreateSchedule(ctx context.Context, d ScheduleDefinition) (*Schedule, error) {
	var s Schedule
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/schedules", body: d}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// CreateScheduleJSON makes a schedule from the body of POST /schedules as
// JSON.
func (c *Client) CreateScheduleJSON(ctx context.Context, definition json.RawMessage) (*Schedule, error) {
	var s Schedule
	if _, err := c.do(ctx, request{method: http.MethodPost, path: "/schedules", body: definition}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSchedule reads a schedule.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	var s Schedule
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/schedules/" + esc(id)}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSchedules reads a page of the tenant's schedules, by name; limit 0
// takes the server's default, cursor is a page's NextCursor.
func (c *Client) ListSchedules(ctx context.Context, limit int, cursor string) (*Page[Schedule], error) {
	var page Page[Schedule]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/schedules", query: pageQuery(limit, cursor)}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// UpdateSchedule changes a schedule (PATCH /schedules/{id}).
func (c *Client) UpdateSchedule(ctx context.Context, id string, ch ScheduleChange) (*Schedule, error) {
	var s Schedule
	if _, err := c.do(ctx, request{method: http.MethodPatch, path: "/schedules/" + esc(id), body: ch}, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// PauseSchedule pauses a schedule: its slots start no runs until it is
// resumed.
func (c *Client) PauseSchedule(ctx context.Context, id string) (*Schedule, error) {
	paused := true
	return c.UpdateSchedule(ctx, id, ScheduleChange{Paused: &paused})
}

// ResumeSchedule resumes a schedule, paused by a client or by itself: its
// failures are forgotten, and its next slot is the first from now.
func (c *Client) ResumeSchedule(ctx context.Context, id string) (*Schedule, error) {
	paused := false
	return c.UpdateSchedule(ctx, id, ScheduleChange{Paused: &paused})
}

// DeleteSchedule deletes a schedule; its runs stay.
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	_, err := c.do(ctx, request{method: http.MethodDelete, path: "/schedules/" + esc(id)}, nil)
	return err
}

// ScheduleRuns reads a page of a schedule's runs, the newest slot first.
func (c *Client) ScheduleRuns(ctx context.Context, id string, limit int, cursor string) (*Page[Run], error) {
	var page Page[Run]
	if _, err := c.do(ctx, request{method: http.MethodGet, path: "/schedules/" + esc(id) + "/runs",
		query: pageQuery(limit, cursor)}, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// pageQuery is the query of a page: its limit (0: the server's default)
// and cursor.
func pageQuery(limit int, cursor string) url.Values {
	q := url.Values{}
	set(q, "cursor", cursor)
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}
