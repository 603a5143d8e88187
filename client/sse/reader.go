package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
	"time"
)

// DefaultMaxSize is the longest line, and the most data one event may
// carry, that NewReader accepts: agentd's events hold whole tool results
// and messages, so they may be large.
const DefaultMaxSize = 16 << 20

// ErrTooLarge is returned by Next when a line, or an event's data, is
// longer than the Reader's limit.
var ErrTooLarge = errors.New("sse: line or event too large")

// Event is one event as it was read off the wire.
type Event struct {
	// ID is the value of the event's own id field. It is not inherited from
	// an earlier event (as EventSource's lastEventId is): a caller that
	// compares what it received with what was sent must see that an event
	// carried no id.
	ID string
	// HasID tells an event with an empty id field ("id:", which resets the
	// last event id) from one without.
	HasID bool
	// Type is the value of the event field, "" when there was none (an
	// EventSource would call it "message").
	Type string
	// Data is the event's data lines joined by "\n".
	Data string
}

// Reader reads events from a stream. It is not safe for concurrent use.
type Reader struct {
	sc       *bufio.Scanner
	max      int
	skipLF   bool // the last line ended with CR: an LF right after it is part of that line end
	searched int  // how much of the line being read holds no line end
	partial  bool // the input ended inside a line
	started  bool // the first line was read (a byte order mark may only begin it)
	pending  bool // a field was read since the last blank line
	hasData  bool // the event being read has a data field
	data     []byte
	ev       Event
	lastType string // the previous event's type, reused to spare an allocation per event
	retry    time.Duration
	hasRetry bool
	err      error
}

// NewReader returns a Reader of r that accepts lines and events of up to
// DefaultMaxSize bytes.
func NewReader(r io.Reader) *Reader { return NewReaderSize(r, DefaultMaxSize) }

// NewReaderSize returns a Reader of r that accepts lines, and events' data,
// of up to limit bytes (DefaultMaxSize when max <= 0).
func NewReaderSize(r io.Reader, limit int) *Reader {
	if limit <= 0 {
		limit = DefaultMaxSize
	}
	sr := &Reader{sc: bufio.NewScanner(r), max: limit}
	// A line must fit in the buffer with the LF that may end the line
	// before it and the first byte of its own line end.
	sr.sc.Buffer(nil, limit+2)
	sr.sc.Split(sr.split)
	return sr
}

// Retry returns the reconnection delay of the last valid retry field read,
// and false if there was none.
func (r *Reader) Retry() (time.Duration, bool) { return r.retry, r.hasRetry }

// Next returns the next event. Blocks without data (such as one that only
// sets the retry hint) and comments are not events, as in EventSource. At
// the end of the input it returns io.EOF, or io.ErrUnexpectedEOF when the
// input ended inside an event, which is then dropped (only a blank line
// dispatches an event); a line or an event over the limit is ErrTooLarge;
// a read error is returned as it is. After an error, Next returns it again.
func (r *Reader) Next() (Event, error) {
	if r.err != nil {
		return Event{}, r.err
	}
	for r.sc.Scan() {
		line := r.sc.Bytes()
		if !r.started {
			r.started = true
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
		}
		if len(line) == 0 {
			if ev, ok := r.dispatch(); ok {
				return ev, nil
			}
			continue
		}
		if err := r.field(line); err != nil {
			r.err = err
			return Event{}, err
		}
	}
	r.err = r.end()
	return Event{}, r.err
}

// end says why the input ended.
func (r *Reader) end() error {
	err := r.sc.Err()
	switch {
	case errors.Is(err, bufio.ErrTooLong):
		return ErrTooLarge
	case err != nil:
		return err
	case r.partial || r.pending:
		return io.ErrUnexpectedEOF
	}
	return io.EOF
}

// split cuts the input into lines, each ending with CRLF, LF or CR. A CR
// ends its line at once, so that an event whose last line ends with CR is
// not held back waiting for the next byte; the LF that may follow is
// skipped with the next line. (A call that only skipped it, returning no
// line, would end the scan at the end of the input.) The scanner hands a
// long line over again after each read: the search goes on from where the
// last one stopped, so that a line costs its length, not its square.
func (r *Reader) split(data []byte, atEOF bool) (advance int, line []byte, err error) {
	start := 0
	if r.skipLF && len(data) > 0 && data[0] == '\n' {
		start = 1
	}
	from := max(start, r.searched)
	if i := lineEnd(data[from:]); i >= 0 {
		end := from + i
		r.skipLF, r.searched = data[end] == '\r', 0
		return end + 1, data[start:end], nil
	}
	if !atEOF {
		r.searched = len(data)
		return 0, nil, nil
	}
	r.partial = r.partial || len(data) > start
	return len(data), nil, nil
}

// lineEnd returns the index of the first CR or LF in b, or -1.
func lineEnd(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	before := b
	if lf >= 0 {
		before = b[:lf]
	}
	if cr := bytes.IndexByte(before, '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// field processes one non-blank line.
func (r *Reader) field(line []byte) error {
	if len(line) > r.max { // the scanner's bound leaves room for line ends
		return ErrTooLarge
	}
	if line[0] == ':' {
		return nil // a comment
	}
	r.pending = true
	name, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(name) {
	case "event":
		r.ev.Type = r.typeOf(value)
	case "data":
		if r.hasData {
			r.data = append(r.data, '\n')
		}
		if len(r.data)+len(value) > r.max {
			return ErrTooLarge
		}
		r.data, r.hasData = append(r.data, value...), true
	case "id":
		if bytes.IndexByte(value, 0) < 0 { // the standard ignores an id with NUL
			r.ev.ID, r.ev.HasID = string(value), true
		}
	case "retry":
		if ms, ok := digits(value); ok {
			r.retry, r.hasRetry = time.Duration(ms)*time.Millisecond, true
		}
	}
	return nil
}

// typeOf returns value as a string, the previous event's when it is the
// same: a stream repeats a few types.
func (r *Reader) typeOf(value []byte) string {
	if string(value) != r.lastType {
		r.lastType = string(value)
	}
	return r.lastType
}

// digits parses a retry value: ASCII digits only, and a number of
// milliseconds a time.Duration can hold.
func digits(value []byte) (int64, bool) {
	if len(value) == 0 {
		return 0, false
	}
	for _, c := range value {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	ms, err := strconv.ParseInt(string(value), 10, 64)
	if err != nil || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return ms, true
}

// dispatch ends the block at a blank line: it returns its event if it had
// data, and starts a new one.
func (r *Reader) dispatch() (Event, bool) {
	ev, ok := r.ev, r.hasData
	if ok {
		ev.Data = string(r.data)
	}
	r.ev, r.data, r.hasData, r.pending = Event{}, r.data[:0], false, false
	return ev, ok
}
