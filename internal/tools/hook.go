package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
)

// PolicyAction is what a policy decides about a call.
type PolicyAction string

// Policy actions.
const (
	PolicyAllow           PolicyAction = "allow"
	PolicyDeny            PolicyAction = "deny"             // the call is not made; the model is told why
	PolicyRequireApproval PolicyAction = "require_approval" // the call waits for a client's approval
)

// HookCall is a tool call as a hook sees it.
type HookCall struct {
	RunID     string
	Tool      string
	Arguments json.RawMessage
}

// Verdict is what a hook decided about a call before it is made.
type Verdict struct {
	Action PolicyAction `json:"action"`
	// Policy names the rule that decided ("policies[2]"), for the record.
	Policy string `json:"policy,omitempty"`
	// Reason is what the model is told of a denial, and what the record says.
	Reason string `json:"reason,omitempty"`
	// Arguments, when not nil, replace the model's arguments.
	Arguments json.RawMessage `json:"-"`
	// Rewritten says that the arguments were replaced.
	Rewritten bool `json:"rewritten,omitempty"`
}

// Hook is the extension point of tool policy: Before decides about a call
// before it is planned (allow, deny, require approval, or allow with other
// arguments); After may change a call's result (to redact it) before it is
// stored and shown. A hook must be safe for concurrent use. An error from
// Before denies the call, saying so; one from After fails it.
type Hook interface {
	Before(ctx context.Context, c HookCall) (Verdict, error)
	After(ctx context.Context, c HookCall, result json.RawMessage) (json.RawMessage, error)
}

// Policy is one entry of a tools file's policies: the calls it matches (a
// glob of tool names, and globs of argument values at JSON pointers), and
// what it decides. The first policy that matches a call decides; a call
// that none matches is allowed.
type Policy struct {
	// Tool is a glob of tool names (path.Match syntax: *, ?, [...]).
	Tool string `json:"tool"`
	// Arguments, when given, must all match: a JSON pointer into the
	// arguments (RFC 6901) and a glob of its value (a string's text, or
	// another value's JSON). A pointer to nothing does not match.
	Arguments map[string]string `json:"arguments"`
	Action    PolicyAction      `json:"action"`
	Reason    string            `json:"reason"`
	// Redact lists JSON pointers into the results of the calls allowed,
	// whose values are replaced by "[redacted]" before they are stored.
	Redact []string `json:"redact"`
}

// Policies are the JSON policies of a tools file, as a Hook.
type Policies []Policy

// ParsePolicies reads the policies of a tools file (none when absent),
// strictly: an unknown field, a bad glob, a pointer that does not start
// with "/", an unknown action or a redaction on a policy that does not
// allow is an error naming the entry.
func ParsePolicies(data []byte) (Policies, error) {
	var file struct {
		Policies []json.RawMessage `json:"policies"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	var out Policies
	var errs []error
	for i, raw := range file.Policies {
		var p Policy
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			errs = append(errs, fmt.Errorf("policies[%d]: %w", i, err))
			continue
		}
		if _, err := dec.Token(); err != io.EOF {
			errs = append(errs, fmt.Errorf("policies[%d]: unexpected data after the entry", i))
			continue
		}
		if err := p.check(); err != nil {
			errs = append(errs, fmt.Errorf("policies[%d]: %w", i, err))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

func (p Policy) check() error {
	var errs []error
	if p.Tool == "" {
		errs = append(errs, errors.New(`missing "tool" (a glob of tool names, such as "crm__*")`))
	} else if _, err := path.Match(p.Tool, ""); err != nil {
		errs = append(errs, fmt.Errorf("tool %q: %w", p.Tool, err))
	}
	for ptr, glob := range p.Arguments {
		if !strings.HasPrefix(ptr, "/") {
			errs = append(errs, fmt.Errorf("arguments: %q is not a JSON pointer (it starts with /)", ptr))
		}
		if _, err := path.Match(glob, ""); err != nil {
			errs = append(errs, fmt.Errorf("arguments[%q]: %w", ptr, err))
		}
	}
	switch p.Action {
	case PolicyAllow, PolicyDeny, PolicyRequireApproval:
	default:
		errs = append(errs, fmt.Errorf("action %q: want allow, deny or require_approval", p.Action))
	}
	for _, ptr := range p.Redact {
		if !strings.HasPrefix(ptr, "/") {
			errs = append(errs, fmt.Errorf("redact: %q is not a JSON pointer", ptr))
		}
	}
	if len(p.Redact) > 0 && p.Action == PolicyDeny {
		errs = append(errs, errors.New("redact: a denied call has no result"))
	}
	return errors.Join(errs...)
}

// match returns the first policy that matches c, and its index.
func (ps Policies) match(c HookCall) (int, *Policy) {
	var args any
	_ = json.Unmarshal(c.Arguments, &args)
	for i := range ps {
		p := &ps[i]
		if ok, _ := path.Match(p.Tool, c.Tool); !ok {
			continue
		}
		matched := true
		for ptr, glob := range p.Arguments {
			v, found := pointer(args, ptr)
			if !found {
				matched = false
				break
			}
			text, isString := v.(string)
			if !isString {
				b, _ := json.Marshal(v)
				text = string(b)
			}
			if ok, _ := path.Match(glob, text); !ok {
				matched = false
				break
			}
		}
		if matched {
			return i, p
		}
	}
	return -1, nil
}

// Before is the first matching policy's decision, else allow.
func (ps Policies) Before(_ context.Context, c HookCall) (Verdict, error) {
	i, p := ps.match(c)
	if p == nil {
		return Verdict{Action: PolicyAllow}, nil
	}
	v := Verdict{Action: p.Action, Policy: fmt.Sprintf("policies[%d]", i), Reason: p.Reason}
	if v.Action == PolicyDeny && v.Reason == "" {
		v.Reason = "the operator's policy does not allow this call"
	}
	return v, nil
}

// After replaces, in the result of a call the first matching policy
// allowed, the values at its redact pointers by "[redacted]".
func (ps Policies) After(_ context.Context, c HookCall, result json.RawMessage) (json.RawMessage, error) {
	_, p := ps.match(c)
	if p == nil || len(p.Redact) == 0 {
		return result, nil
	}
	var doc any
	if err := json.Unmarshal(result, &doc); err != nil {
		return result, nil // not JSON: nothing to point into
	}
	changed := false
	for _, ptr := range p.Redact {
		changed = redact(doc, ptr) || changed
	}
	if !changed {
		return result, nil
	}
	return marshalNoEscape(doc)
}

// pointer resolves an RFC 6901 JSON pointer in doc.
func pointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 || n >= len(v) {
				return nil, false
			}
			cur = v[n]
		default:
			return nil, false
		}
	}
	return cur, true
}

// redact replaces the value at ptr in doc by "[redacted]"; it reports
// whether there was one.
func redact(doc any, ptr string) bool {
	i := strings.LastIndex(ptr, "/")
	parent, ok := pointer(doc, ptr[:i])
	if !ok {
		return false
	}
	tok := strings.ReplaceAll(strings.ReplaceAll(ptr[i+1:], "~1", "/"), "~0", "~")
	switch v := parent.(type) {
	case map[string]any:
		if _, ok := v[tok]; ok {
			v[tok] = "[redacted]"
			return true
		}
	case []any:
		if n, err := strconv.Atoi(tok); err == nil && n >= 0 && n < len(v) {
			v[n] = "[redacted]"
			return true
		}
	}
	return false
}
