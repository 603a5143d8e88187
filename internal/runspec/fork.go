package runspec

import "github.com/agentd/agentd"

// RequestOf is the request that would build a run with model and params
// again (its input, conversation and the door's own fields aside): a fork
// of a run starts from it, and the builder applies the server's ceilings
// of today to it as to any request. Instructions are taken as they were
// filled; the run's agent and variables are the caller's to carry.
func RequestOf(model string, p agentd.RunParams) Request {
	r := Request{Model: &model, MaxSteps: &p.MaxSteps, NoCompaction: p.NoCompaction, ApprovalTools: p.ApprovalTools,
		ClientToolsEnd: p.ClientToolsEnd, Metadata: p.Metadata}
	if p.Instructions != "" {
		r.Instructions = &p.Instructions
	}
	if p.Tools != nil {
		tools := append([]string{}, p.Tools...)
		r.Tools = &tools
	}
	if p.ClientTools != nil {
		cts := make([]ClientTool, len(p.ClientTools))
		for i, t := range p.ClientTools {
			cts[i] = ClientTool{Name: &t.Name, Description: &t.Description, Parameters: t.Parameters}
		}
		r.ClientTools = &cts
	}
	t := p.Timeouts
	r.Timeouts = &Timeouts{TotalMS: &t.TotalMS, StepMS: &t.StepMS, IdleMS: &t.IdleMS, ToolMS: &t.ToolMS, ActionMS: &t.ActionMS}
	if t.ActionMS == 0 { // stored before it existed: the default
		r.Timeouts.ActionMS = nil
	}
	// A run stored without them (made by the store, not a door) takes the
	// defaults.
	if onDisconnect := string(p.OnDisconnect); onDisconnect != "" {
		r.OnDisconnect = &onDisconnect
	}
	if ifBusy := string(p.IfBusy); ifBusy != "" {
		r.IfBusy = &ifBusy
	}
	if p.CompactAt > 0 {
		r.CompactAt = &p.CompactAt
	}
	if p.CompactThreshold > 0 {
		r.CompactThreshold = &p.CompactThreshold
	}
	l := p.LoopLimits.OrDefaults()
	r.LoopLimits = &LoopLimits{FailuresInARow: &l.FailuresInARow, IdenticalCalls: &l.IdenticalCalls}
	r.Sampling = samplingOf(p.Sampling)
	return r
}

// samplingOf is s as a request asks it.
func samplingOf(s agentd.Sampling) *Sampling {
	out := &Sampling{Temperature: s.Temperature, TopP: s.TopP, ToolChoice: s.ToolChoice, ParallelToolCalls: s.ParallelToolCalls}
	if s.ReasoningEffort != "" {
		out.ReasoningEffort = &s.ReasoningEffort
	}
	if s.MaxOutputTokens > 0 {
		out.MaxOutputTokens = &s.MaxOutputTokens
	}
	if f := s.Format; f != nil {
		of := &OutputFormat{Type: &f.Type, Strict: f.Strict}
		if f.Type == agentd.OutputJSONSchema {
			of.Name, of.Schema = &f.Name, f.Schema
			if f.Description != "" {
				of.Description = &f.Description
			}
		}
		out.Format = of
	}
	return out
}
