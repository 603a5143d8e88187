package runspec

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/agentd/agentd"
)

// Bounds of a run's sampling.
const (
	MaxTemperature = 2.0
	MaxTopP        = 1.0
	// MaxOutputTokens caps sampling.max_output_tokens.
	MaxOutputTokens = 1_000_000
	// MaxFormatSchemaBytes caps a json_schema format's schema, compacted.
	MaxFormatSchemaBytes = 64 << 10
)

// Sampling is how a run's model is asked to sample, as asked; an absent
// field leaves the model's default.
type Sampling struct {
	MaxOutputTokens *int
	Temperature     *float64
	TopP            *float64
	Format          *OutputFormat
	// ToolChoice and ParallelToolCalls (agentd.Sampling's), nil when not
	// asked; a named tool must be one of the run's.
	ToolChoice        *agentd.ToolChoice
	ParallelToolCalls *bool
	// ReasoningEffort is one of agentd.ReasoningEfforts; nil: the model's
	// default.
	ReasoningEffort *string
}

// OutputFormat is the structured output a run asks of its model, as asked:
// Type is text, json_object or json_schema; Name, Description, Schema and
// Strict belong to json_schema alone.
type OutputFormat struct {
	Type        *string
	Name        *string
	Description *string
	Schema      json.RawMessage // a JSON object: the JSON Schema of the answer
	Strict      *bool
}

// formatNamePattern is what a json_schema format's name must match, as
// OpenAI's API requires.
var formatNamePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// outputFormats are the format types, plain text first.
var outputFormats = []string{agentd.OutputText, agentd.OutputJSONObject, agentd.OutputJSONSchema}

// sampling checks a run's sampling: temperature from 0 to 2, top_p from 0
// to 1, max_output_tokens from 1 to MaxOutputTokens, and a format (below).
// Absent, the model samples as it does by default.
func sampling(s *Sampling) (agentd.Sampling, error) {
	var out agentd.Sampling
	if s == nil {
		return out, nil
	}
	if s.MaxOutputTokens != nil {
		if *s.MaxOutputTokens < 1 || *s.MaxOutputTokens > MaxOutputTokens {
			return out, fieldError("sampling.max_output_tokens", "must be between 1 and %d", MaxOutputTokens)
		}
		out.MaxOutputTokens = *s.MaxOutputTokens
	}
	for _, f := range []struct {
		name string
		in   *float64
		max  float64
		out  **float64
	}{
		{"sampling.temperature", s.Temperature, MaxTemperature, &out.Temperature},
		{"sampling.top_p", s.TopP, MaxTopP, &out.TopP},
	} {
		if f.in == nil {
			continue
		}
		if v := *f.in; math.IsNaN(v) || v < 0 || v > f.max {
			return out, fieldError(f.name, "must be a number from 0 to %g", f.max)
		}
		v := *f.in
		*f.out = &v
	}
	if s.Format != nil {
		f, err := outputFormat(*s.Format)
		if err != nil {
			return out, err
		}
		out.Format = &f
	}
	if c := s.ToolChoice; c != nil {
		switch c.Mode {
		case agentd.ToolChoiceAuto, agentd.ToolChoiceNone, agentd.ToolChoiceRequired:
			if c.Name != "" {
				return out, fieldError("sampling.tool_choice", "names a tool only in mode %q", agentd.ToolChoiceTool)
			}
		case agentd.ToolChoiceTool:
			if c.Name == "" {
				return out, fieldError("sampling.tool_choice", "must name the tool the model must call")
			}
		default:
			return out, fieldError("sampling.tool_choice", "must be one of %s, %s, %s or %s",
				agentd.ToolChoiceAuto, agentd.ToolChoiceNone, agentd.ToolChoiceRequired, agentd.ToolChoiceTool)
		}
		choice := *c
		out.ToolChoice = &choice
	}
	out.ParallelToolCalls = s.ParallelToolCalls
	if e := s.ReasoningEffort; e != nil {
		if !slices.Contains(agentd.ReasoningEfforts, *e) {
			return out, fieldError("sampling.reasoning_effort", "must be one of %s", strings.Join(agentd.ReasoningEfforts, ", "))
		}
		out.ReasoningEffort = *e
	}
	return out, nil
}

// checkToolChoice checks that a run whose tool choice makes its model call
// a tool has one, and that a named tool is one of its own.
func checkToolChoice(p agentd.RunParams) error {
	c := p.Sampling.ToolChoice
	if !c.Forces() {
		return nil
	}
	if len(p.ClientTools) == 0 && p.Tools != nil && len(p.Tools) == 0 {
		return fieldError("sampling.tool_choice", "asks for a tool call, and the run has no tools")
	}
	if c.Mode != agentd.ToolChoiceTool {
		return nil
	}
	if _, ok := p.ClientTool(c.Name); ok || p.Tools == nil || slices.Contains(p.Tools, c.Name) {
		return nil
	}
	return fieldError("sampling.tool_choice", "%q is not a tool of the run", c.Name)
}

// outputFormat checks a run's output format: its type one of text,
// json_object and json_schema; a json_schema one with a name matching
// ^[a-zA-Z0-9_-]{1,64}$ and a schema that is a JSON object (of at most
// MaxFormatSchemaBytes, compacted), and maybe a description and strict;
// the other types with none of those.
func outputFormat(f OutputFormat) (agentd.OutputFormat, error) {
	if f.Type == nil {
		return agentd.OutputFormat{}, fieldError("sampling.format.type", "is required: one of text, json_object, json_schema")
	}
	typ, err := OneOf("sampling.format.type", f.Type, outputFormats)
	if err != nil {
		return agentd.OutputFormat{}, err
	}
	out := agentd.OutputFormat{Type: typ}
	if typ != agentd.OutputJSONSchema {
		for _, g := range []struct {
			name  string
			given bool
		}{
			{"name", f.Name != nil}, {"description", f.Description != nil}, {"schema", !IsNull(f.Schema)}, {"strict", f.Strict != nil},
		} {
			if g.given {
				return out, fieldError("sampling.format."+g.name, "is only taken by the json_schema format, not %s", typ)
			}
		}
		return out, nil
	}
	if f.Name == nil || !formatNamePattern.MatchString(*f.Name) {
		return out, fieldError("sampling.format.name", "is required: a name matching ^[a-zA-Z0-9_-]{1,64}$")
	}
	out.Name = *f.Name
	if f.Description != nil {
		if len(*f.Description) > MaxDescriptionBytes {
			return out, fieldError("sampling.format.description", "must be at most %d bytes", MaxDescriptionBytes)
		}
		if err := Storable("sampling.format.description", *f.Description); err != nil {
			return out, err
		}
		out.Description = *f.Description
	}
	if IsNull(f.Schema) {
		return out, fieldError("sampling.format.schema", "is required: the JSON Schema of the answer, a JSON object")
	}
	var buf bytes.Buffer
	if raw := bytes.TrimSpace(f.Schema); raw[0] != '{' || json.Compact(&buf, raw) != nil {
		return out, fieldError("sampling.format.schema", "must be a JSON object")
	}
	if buf.Len() > MaxFormatSchemaBytes {
		return out, fieldError("sampling.format.schema", "must be at most %d bytes of JSON", MaxFormatSchemaBytes)
	}
	if err := StorableJSON("sampling.format.schema", buf.Bytes()); err != nil {
		return out, err
	}
	out.Schema = buf.Bytes()
	if f.Strict != nil {
		v := *f.Strict
		out.Strict = &v
	}
	return out, nil
}
