package agentd

import (
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// TimingError says what is wrong with a schedule's timing: Field is cron
// or timezone.
type TimingError struct {
	Field   string
	Message string
}

func (e *TimingError) Error() string { return e.Field + ": " + e.Message }

// Timing is a schedule's cron expression in its time zone.
type Timing struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseTiming reads a cron expression (5 fields, a descriptor such as @hourly,
// or @every <duration> of whole seconds, at least one) and an IANA time
// zone ("" is UTC). Errors are *TimingError. The host's time zone
// database is used; a binary that may run without one imports time/tzdata.
func ParseTiming(expr, timezone string) (Timing, error) {
	if timezone == "" {
		timezone = "UTC"
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil || timezone == "Local" {
		return Timing{}, &TimingError{Field: "timezone", Message: "must be an IANA time zone such as UTC or Europe/Paris"}
	}
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return Timing{}, &TimingError{Field: "cron", Message: "is required: 5 fields (minute hour day month weekday) or @every <duration>"}
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Timing{}, &TimingError{Field: "cron", Message: "must not name a time zone: timezone does"}
	}
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		period, err := time.ParseDuration(strings.TrimSpace(d))
		switch {
		case err != nil:
			return Timing{}, &TimingError{Field: "cron", Message: "@every takes a duration such as 30s, 5m or 1h30m"}
		case period < time.Second:
			return Timing{}, &TimingError{Field: "cron", Message: "@every takes a period of at least 1s"}
		case period%time.Second != 0:
			return Timing{}, &TimingError{Field: "cron", Message: "@every takes a whole number of seconds"}
		}
	}
	sched, err := cron.ParseStandard(expr)
	if err != nil {
		return Timing{}, &TimingError{Field: "cron", Message: "is not a cron expression: " + err.Error()}
	}
	return Timing{sched: sched, loc: loc}, nil
}

// Next returns the first slot after t (in UTC); the zero time when there is
// none (an expression such as 0 0 30 2 *).
func (t Timing) Next(after time.Time) time.Time {
	n := t.sched.Next(after.In(t.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// maxCatchUp bounds the slots Latest walks through; past it, the latest
// slot is looked for from a little before now.
const maxCatchUp = 10000

// Latest returns the latest slot at or before now that is after from (from
// itself when none is), and the first slot after now.
func (t Timing) Latest(from, now time.Time) (latest, next time.Time) {
	latest, next = from, t.Next(from)
	for i := 0; !next.IsZero() && !next.After(now); i++ {
		if i == maxCatchUp {
			// A long outage of a frequent schedule: start again a day
			// before now, which holds the latest slot of all but the
			// rarest expressions.
			if day := now.Add(-24 * time.Hour); day.After(latest) {
				next, i = t.Next(day), 0
				continue
			}
		}
		latest, next = next, t.Next(next)
	}
	return latest, next
}
