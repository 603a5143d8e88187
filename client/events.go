package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"time"

	"github.com/agentd/agentd/client/sse"
)

// maxReconnectWait caps the wait between two connections of Events.
const maxReconnectWait = 5 * time.Second

// Events follows a run's events after seq after (0: from the first): the
// stored ones, then the live ones, until the run's end: its terminal event
// is the last it yields (a run that was resumed after an earlier end goes
// on past it, as the server's stream does). When the connection breaks, or
// the server goes away, it connects again (to the same base URL) with
// Last-Event-ID, after the server's retry: hint, doubling while
// connections keep failing, for as long as ctx lasts: it skips nothing and
// repeats nothing. It yields an error and stops when ctx ends, when the
// server refuses the stream (an *Error, such as run_not_found), when an
// event cannot be read, or when the caller stops ranging.
//
// While a run waits for a client (requires_action) its stream stays open:
// stop ranging at run.requires_action to act on it.
//
// A run that has ended with no event after after yields nothing.
func (c *Client) Events(ctx context.Context, runID string, after int64) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		last := after
		retry := time.Second // until the server says
		wait := time.Duration(0)
		for {
			if wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					yield(Event{}, ctx.Err())
					return
				}
			}
			progressed, ended, hint, err := c.follow(ctx, runID, &last, yield)
			if hint > 0 {
				retry = hint
			}
			var bad *badEvent
			switch {
			case ended:
				return
			case errors.As(err, &bad):
				yield(Event{}, err)
				return
			case ctx.Err() != nil:
				yield(Event{}, ctx.Err())
				return
			case err != nil:
				var apiErr *Error
				if errors.As(err, &apiErr) && !retryableStatus(apiErr.Status) {
					yield(Event{}, err)
					return
				}
			}
			if progressed || wait == 0 {
				wait = retry
			} else {
				wait = min(wait*2, maxReconnectWait)
			}
		}
	}
}

func retryableStatus(s int) bool {
	return s == http.StatusTooManyRequests || s == http.StatusBadGateway || s == http.StatusServiceUnavailable ||
		s == http.StatusGatewayTimeout || s >= 500
}

// errStop: the caller stopped ranging.
var errStop = errors.New("stop")

// badEvent is an event that cannot be read: reconnecting would not help.
type badEvent struct{ err error }

func (e *badEvent) Error() string { return e.err.Error() }
func (e *badEvent) Unwrap() error { return e.err }

// follow reads one connection of the stream after *last, yielding each new
// event. ended: the stream is over (the server closed it after a terminal
// event, or has nothing more, or the caller stopped).
func (c *Client) follow(ctx context.Context, runID string, last *int64, yield func(Event, error) bool) (progressed, ended bool, retry time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/runs/"+esc(runID)+"/events", nil)
	if err != nil {
		return false, false, 0, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, false, 0, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNoContent:
		return false, true, 0, nil // ended, nothing after *last
	case resp.StatusCode != http.StatusOK:
		return false, false, 0, readError(resp)
	}
	r := sse.NewReader(resp.Body)
	progressed, ended, err = read(r, last, yield)
	retry, _ = r.Retry()
	return progressed, ended, retry, err
}

// read yields the events of one connection that come after *last.
func read(r *sse.Reader, last *int64, yield func(Event, error) bool) (progressed, ended bool, err error) {
	terminal := false // the last event yielded was a terminal one
	for {
		raw, err := r.Next()
		switch {
		case errors.Is(err, io.EOF) && terminal:
			return progressed, true, nil // the server ends a stream after the run's end
		case errors.Is(err, io.EOF):
			return progressed, false, io.ErrUnexpectedEOF // the server closed the stream before the run's end
		case errors.Is(err, sse.ErrTooLarge):
			return progressed, false, &badEvent{fmt.Errorf("agentd: event after %d: %w", *last, err)} // it would be as large again
		case err != nil:
			return progressed, false, err
		case raw.ID == "" || raw.Data == "":
			continue // a heartbeat: not stored, so without an id
		}
		ev, err := parseEvent(raw.ID, raw.Type, raw.Data)
		switch {
		case err != nil:
			return progressed, false, &badEvent{err}
		case ev.Seq > *last:
			*last, progressed, terminal = ev.Seq, true, ev.Terminal()
			if !yield(ev, nil) {
				return progressed, true, errStop
			}
		}
	}
}

func parseEvent(id, typ, data string) (Event, error) {
	var ev Event
	if err := json.Unmarshal([]byte(data), &ev); err != nil {
		return ev, fmt.Errorf("agentd: event %s: %w", id, err)
	}
	if strconv.FormatInt(ev.Seq, 10) != id || (typ != "" && string(ev.Type) != typ) {
		return ev, fmt.Errorf("agentd: event %s (%s) holds seq %d (%s)", id, typ, ev.Seq, ev.Type)
	}
	return ev, nil
}
