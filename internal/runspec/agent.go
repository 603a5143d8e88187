package runspec

import (
	"cmp"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Bounds of a run's variables.
const (
	// MaxVariables caps the variables of a run.
	MaxVariables = 64
	// MaxVariableBytes caps a variable's value.
	MaxVariableBytes = 32 << 10
)

// placeholder is a variable's place in instructions: {{name}}, spaces
// allowed inside the braces.
var placeholder = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// variableName is what a variable's name must match.
var variableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Placeholders returns the names of the variables instructions use, each
// once, in order of first use.
func Placeholders(instructions string) []string {
	var out []string
	for _, m := range placeholder.FindAllStringSubmatch(instructions, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// fill replaces each {{name}} of instructions with the variable's value:
// every placeholder needs one (variables a run gives beyond them are left
// unused). Values are put in as they are; a value's own braces are not
// read again.
func fill(instructions string, vars map[string]string) (string, error) {
	if len(vars) > MaxVariables {
		return "", fieldError("variables", "must hold at most %d variables", MaxVariables)
	}
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if !variableName.MatchString(name) {
			return "", fieldError("variables", "%q is not a variable name: names match ^[A-Za-z_][A-Za-z0-9_]*$", name)
		}
		v := vars[name]
		if len(v) > MaxVariableBytes {
			return "", fieldError("variables."+name, "must be at most %d bytes", MaxVariableBytes)
		}
		if err := Storable("variables."+name, v); err != nil {
			return "", err
		}
	}
	for _, name := range Placeholders(instructions) {
		if _, ok := vars[name]; !ok {
			return "", fieldError("variables."+name, "is required: the instructions use {{%s}}", name)
		}
	}
	return placeholder.ReplaceAllStringFunc(instructions, func(m string) string {
		return vars[strings.TrimSpace(m[2:len(m)-2])]
	}), nil
}

// Over returns the request of a run that starts from an agent's definition
// base, with the run's own request over it: each field the run gives
// replaces the agent's (tools, client tools and metadata whole; sampling,
// timeouts and loop limits field by field), and the run's input,
// conversation, variables, user and the door's own fields are the run's
// (memory, too, replaces the agent's whole; "memory": false turns it off). The
// builder then applies the server's defaults and ceilings to the result,
// as to any request.
func Over(base, run Request) Request {
	out := run
	pick(&out.Model, base.Model)
	pick(&out.Instructions, base.Instructions)
	if out.Tools == nil {
		out.Tools, out.SubAgents = base.Tools, base.SubAgents
	}
	pick(&out.ClientTools, base.ClientTools)
	pick(&out.MaxSteps, base.MaxSteps)
	pick(&out.OnDisconnect, base.OnDisconnect)
	pick(&out.IfBusy, base.IfBusy)
	pick(&out.OnQuota, base.OnQuota)
	pick(&out.CompactAt, base.CompactAt)
	if out.Model == nil {
		pick(&out.Models, base.Models)
	}
	pick(&out.Thinking, base.Thinking)
	pick(&out.MaxCost, base.MaxCost)
	pick(&out.Memory, base.Memory)
	if IsNull(out.Metadata) {
		out.Metadata = base.Metadata
	}
	out.Timeouts = overTimeouts(base.Timeouts, run.Timeouts)
	out.LoopLimits = overLoopLimits(base.LoopLimits, run.LoopLimits)
	out.Sampling = overSampling(base.Sampling, run.Sampling)
	return out
}

// pick sets *dst to base when the run left it out.
func pick[T any](dst **T, base *T) {
	if *dst == nil {
		*dst = base
	}
}

func overTimeouts(base, run *Timeouts) *Timeouts {
	if base == nil || run == nil {
		return cmp.Or(run, base)
	}
	out := *run
	pick(&out.TotalMS, base.TotalMS)
	pick(&out.StepMS, base.StepMS)
	pick(&out.IdleMS, base.IdleMS)
	pick(&out.ToolMS, base.ToolMS)
	pick(&out.ActionMS, base.ActionMS)
	return &out
}

func overLoopLimits(base, run *LoopLimits) *LoopLimits {
	if base == nil || run == nil {
		return cmp.Or(run, base)
	}
	out := *run
	pick(&out.FailuresInARow, base.FailuresInARow)
	pick(&out.IdenticalCalls, base.IdenticalCalls)
	return &out
}

func overSampling(base, run *Sampling) *Sampling {
	if base == nil || run == nil {
		return cmp.Or(run, base)
	}
	out := *run
	pick(&out.MaxOutputTokens, base.MaxOutputTokens)
	pick(&out.Temperature, base.Temperature)
	pick(&out.TopP, base.TopP)
	pick(&out.Format, base.Format)
	pick(&out.ToolChoice, base.ToolChoice)
	pick(&out.ParallelToolCalls, base.ParallelToolCalls)
	pick(&out.ReasoningEffort, base.ReasoningEffort)
	return &out
}
