package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// Case composes the run of case c of evaluation e under version label
// (an agent version's number, or agentd.CandidateLabel for e's candidate
// definition), for e's tenant and actor: the case's recorded conversation
// (a case from a run) and input, its variables and user, over the
// version's definition; its memory an overlay of its own over real memory
// as of the case (what it writes nothing else reads); its tools answered
// as an evaluation's (agentd.RunEval). It waits in its tenant's queue
// rather than being refused over quota. A version that no longer builds
// a run is a *runspec.FieldError.
func (c *Composer) Case(ctx context.Context, e agentd.Evaluation, cs agentd.DatasetCase, label string) (agentd.RunCreate, error) {
	sr := runspec.Request{Variables: cs.Variables}
	if cs.User != "" {
		sr.User = &cs.User
	}
	var err error
	if sr.Input, sr.InputText, err = caseInput(cs); err != nil {
		return agentd.RunCreate{}, err
	}
	if sr, err = c.evalAgent(ctx, e, label, sr); err != nil {
		return agentd.RunCreate{}, err
	}
	spec, err := c.build(ctx, e.TenantID, sr)
	if err != nil {
		return agentd.RunCreate{}, err
	}
	asOf := e.CreatedAt
	ev := &agentd.RunEval{ID: e.ID, Case: cs.ID, Stubs: cs.Stubs}
	if cs.Recorded != nil {
		asOf, ev.Recorded = cs.Recorded.AsOf, cs.Recorded.Calls
	}
	if asOf.IsZero() {
		asOf = time.Now()
	}
	spec.Params.Eval = ev
	spec.Params.Memory = forkMemory(spec.Params.Memory, nil, asOf)
	if spec.Params.Pinned, err = c.pin(ctx, e.TenantID, spec.Params.Memory); err != nil {
		return agentd.RunCreate{}, err
	}
	spec.Params.OnDisconnect, spec.Params.Webhook, spec.Params.Unstored = agentd.OnDisconnectContinue, nil, false
	spec.OnQuota = agentd.OnQuotaQueue
	return create(Caller{Tenant: e.TenantID, Actor: e.Actor}, spec), nil
}

// caseInput is the input of a case's run: its recorded conversation (a
// case from a run), then its input.
func caseInput(cs agentd.DatasetCase) ([]agentd.InputMessage, bool, error) {
	var msgs []agentd.InputMessage
	if cs.Recorded != nil {
		var err error
		if msgs, err = RecordedInput(cs.Recorded.Messages, "recorded.messages"); err != nil {
			return nil, false, err
		}
	}
	if runspec.IsNull(cs.Input) {
		return msgs, false, nil
	}
	in, text, err := ParseInputAt(cs.Input, "input")
	if err != nil {
		return nil, false, err
	}
	return append(msgs, in...), text && len(msgs) == 0, nil
}

// evalAgent is sr over the definition that label of evaluation e names.
func (c *Composer) evalAgent(ctx context.Context, e agentd.Evaluation, label string, sr runspec.Request) (runspec.Request, error) {
	if label != agentd.CandidateLabel {
		v, err := agentd.EvalVersion(label)
		if err != nil {
			return sr, fieldError("versions", "%s", err.Error())
		}
		return c.withAgent(ctx, e.TenantID, sr, Agent{Name: e.Agent, Version: v})
	}
	var def AgentDefinition
	if err := decodeField(e.Candidate, &def, "candidate"); err != nil {
		return sr, err
	}
	base, err := def.Request()
	if err != nil {
		return sr, fmt.Errorf("the candidate definition: %w", err)
	}
	out := runspec.Over(base, sr)
	out.Agent = &agentd.AgentRef{Name: e.Agent}
	return out, nil
}

// Candidate checks an evaluation's unsaved candidate definition of
// tenant's agent name (raw, as PUT /agents/{name} takes it) as Define
// checks a version to be saved, and returns it as stored.
func (c *Composer) Candidate(ctx context.Context, tenant, name string, raw json.RawMessage) (json.RawMessage, error) {
	var def AgentDefinition
	if err := decodeField(raw, &def, "candidate"); err != nil {
		return nil, err
	}
	if _, err := c.Define(ctx, tenant, name, def); err != nil {
		var fe *runspec.FieldError
		if errors.As(err, &fe) {
			return nil, &runspec.FieldError{Field: joinField("candidate", fe.Field), Message: fe.Message}
		}
		return nil, err
	}
	return json.Marshal(def)
}
