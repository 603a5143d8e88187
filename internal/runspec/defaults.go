package runspec

import "github.com/agentd/agentd"

// Defaults fill in what a request leaves out, and bound what it may ask.
type Defaults struct {
	// Model is used when the request names none. When it is empty too, a
	// request without a model is refused.
	Model string
	// MaxSteps is the default step budget (default DefaultMaxSteps).
	MaxSteps int
	// MaxStepsLimit is the largest max_steps a client may ask for (default
	// DefaultMaxStepsLimit).
	MaxStepsLimit int
	// Timeouts are the defaults of the timeouts a request does not give, in
	// milliseconds (defaults: total 600000, step 120000, idle 60000, tool
	// 60000, action 86400000). A zero field takes its default.
	Timeouts agentd.Timeouts
	// MaxTimeouts are the ceilings of the timeouts a client may ask for, in
	// milliseconds (defaults: total 86400000 (24 h), step 3600000 (1 h),
	// idle 600000 (10 min), tool 3600000 (1 h), action 604800000 (7
	// days)). A client's 0 asks for the ceiling, so that no run is
	// unbounded. A zero field takes its default; a default above its
	// ceiling is lowered to it.
	MaxTimeouts agentd.Timeouts
	// MaxInputFileBytes caps one image or file of a run's input (default
	// DefaultMaxInputFileBytes); MaxInputFilesBytes caps them all (default
	// DefaultMaxInputFilesBytes, and at least MaxInputFileBytes).
	MaxInputFileBytes, MaxInputFilesBytes int64
	// Accepts says whether model takes input of kind (agentd.PartImage,
	// agentd.PartFile) beside text, as its profile says; nil: every model
	// takes both.
	Accepts func(model string, kind agentd.PartType) bool
}

// Default values of Defaults.
const (
	DefaultMaxSteps      = 16
	DefaultMaxStepsLimit = 100
	DefaultTotalMS       = 600_000
	DefaultStepMS        = 120_000
	DefaultIdleMS        = 60_000
	DefaultToolMS        = 60_000
	DefaultActionMS      = agentd.DefaultActionMS
	DefaultMaxTotalMS    = 24 * 60 * 60 * 1000
	DefaultMaxStepMS     = 60 * 60 * 1000
	DefaultMaxIdleMS     = 10 * 60 * 1000
	DefaultMaxToolMS     = 60 * 60 * 1000
	DefaultMaxActionMS   = 7 * 24 * 60 * 60 * 1000
)

// resolved returns d with its zero fields at their defaults and its
// default timeouts within their ceilings.
func (d Defaults) resolved() Defaults {
	if d.MaxStepsLimit <= 0 {
		d.MaxStepsLimit = DefaultMaxStepsLimit
	}
	if d.MaxSteps <= 0 {
		d.MaxSteps = min(DefaultMaxSteps, d.MaxStepsLimit)
	}
	if d.MaxInputFileBytes <= 0 {
		d.MaxInputFileBytes = DefaultMaxInputFileBytes
	}
	if d.MaxInputFilesBytes <= 0 {
		d.MaxInputFilesBytes = DefaultMaxInputFilesBytes
	}
	d.MaxInputFilesBytes = max(d.MaxInputFilesBytes, d.MaxInputFileBytes)
	t, c := &d.Timeouts, &d.MaxTimeouts
	for _, f := range []struct {
		v, ceil      *int64
		def, ceilDef int64
	}{
		{&t.TotalMS, &c.TotalMS, DefaultTotalMS, DefaultMaxTotalMS},
		{&t.StepMS, &c.StepMS, DefaultStepMS, DefaultMaxStepMS},
		{&t.IdleMS, &c.IdleMS, DefaultIdleMS, DefaultMaxIdleMS},
		{&t.ToolMS, &c.ToolMS, DefaultToolMS, DefaultMaxToolMS},
		{&t.ActionMS, &c.ActionMS, DefaultActionMS, DefaultMaxActionMS},
	} {
		if *f.v <= 0 {
			*f.v = f.def
		}
		if *f.ceil <= 0 {
			*f.ceil = f.ceilDef
		}
		*f.v = min(*f.v, *f.ceil)
	}
	return d
}
