package responses

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/internal/runspec"
)

// Hosted are the types of OpenAI's hosted tools, which OpenAI runs for a
// response: agentd runs none of them itself. An operator may map one to a
// tool of its own (the tools file's hosted_tools); a request's tool of a
// type not mapped is left out, saying so in the response's warnings,
// rather than refused, since clients send them by default (Codex's
// web_search).
var Hosted = []string{"web_search", "web_search_preview", "web_search_preview_2025_03_11", "web_search_2025_08_26",
	"file_search", "code_interpreter", "image_generation", "computer_use_preview", "computer_use", "local_shell", "shell",
	"apply_patch"}

// Warning is something a response did otherwise than its request asked
// (a hosted tool left out): Param names the request's field.
type Warning struct {
	Param   string `json:"param"`
	Message string `json:"message"`
}

// NamespaceSep joins a namespace tool's name and the name of one of its
// functions into the name the model sees.
const NamespaceSep = "__"

// toolSet is what a request's tools come to.
type toolSet struct {
	fns    []runspec.ClientTool
	echoed []json.RawMessage
	// mcp maps each of the operator's tools the request offers to the
	// server_label it shows as; approve are those that wait for the
	// client's approval.
	mcp     map[string]string
	approve []string
	// namespaces maps the model's name of each function of a namespace
	// tool to its namespace and name.
	namespaces map[string][2]string
	// custom are the model's names of the custom tools.
	custom   map[string]bool
	warnings []Warning
}

// functionTools reads tools: function tools (alone or grouped in
// namespace tools), which are agentd's client tools; mcp tools, which name
// the operator's tools the run may call (by name, with their
// server_label); hosted tools, which stand for an operator's tool or are
// left out; and what the response echoes of them.
func (r Request) functionTools(p *refusals) toolSet {
	ts := r.functionToolsAt(p, "tools")
	r.additionalTools(&ts, p)
	return ts
}

// functionToolsAt reads r.Tools, which the request's field at names.
func (r Request) functionToolsAt(p *refusals, at string) toolSet {
	ts := toolSet{echoed: []json.RawMessage{}}
	if len(r.Tools) == 0 || string(r.Tools) == "null" {
		return ts
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(r.Tools, &raw); err != nil {
		p.add(field(at, "must be a list of tools"))
		return ts
	}
	for i, t := range raw {
		name := fmt.Sprintf("%s[%d]", at, i)
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(t, &probe); err != nil {
			p.add(field(name, "must be a tool (an object)"))
			continue
		}
		switch {
		case probe.Type == "mcp":
			if !r.probe {
				p.add(r.addMCP(&ts, name, t))
			}
		case probe.Type == "function":
			p.add(ts.addFunction(name, t, ""))
		case probe.Type == "custom":
			p.add(ts.addCustom(name, t, ""))
		case probe.Type == "namespace":
			p.add(ts.addNamespace(name, t))
		case slices.Contains(Hosted, probe.Type):
			r.addHosted(&ts, name, probe.Type, t)
		default:
			p.add(field(name+".type", "%q tools are not supported by this server: function, custom, namespace and mcp tools, "+
				"and hosted tools its operator maps (%s)", probe.Type, strings.Join(Hosted, ", ")))
		}
	}
	return ts
}

// addMCP adds an mcp tool's tools.
func (r Request) addMCP(ts *toolSet, name string, raw json.RawMessage) error {
	names, needs, label, e, err := r.mcpTool(name, raw)
	if err != nil {
		return err
	}
	if ts.mcp == nil {
		ts.mcp = map[string]string{}
	}
	for _, n := range names {
		ts.mcp[n] = label
	}
	ts.approve = append(ts.approve, needs...)
	ts.echoed = append(ts.echoed, e)
	return nil
}

// function is a function tool of a request.
type function struct {
	Type        string          `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
	// DeferLoading is OpenAI's hint that a tool's definition may be
	// loaded when it is searched for: every tool is loaded here.
	DeferLoading *bool `json:"defer_loading"`
}

// addFunction adds a function tool; ns is the namespace tool it is one of
// ("" for none), and its name for the model is then ns__name. A function
// of a namespace is echoed with its namespace.
func (ts *toolSet) addFunction(name string, raw json.RawMessage, ns string) error {
	var fn function
	if err := strict(raw, &fn); err != nil {
		return decodeItemError(name, err)
	}
	if fn.Type != "function" {
		return field(name+".type", "must be function: a namespace groups function tools")
	}
	modelName := fn.Name
	if ns != "" {
		if fn.Name == nil || *fn.Name == "" {
			return field(name+".name", "is required")
		}
		n := ns + NamespaceSep + *fn.Name
		modelName = &n
		if ts.namespaces == nil {
			ts.namespaces = map[string][2]string{}
		}
		ts.namespaces[n] = [2]string{ns, *fn.Name}
	}
	ts.fns = append(ts.fns, runspec.ClientTool{Name: modelName, Description: fn.Description, Parameters: fn.Parameters})
	if ns != "" {
		return nil
	}
	e := map[string]any{"type": "function", "name": fn.Name, "description": fn.Description,
		"parameters": json.RawMessage("null"), "strict": fn.Strict}
	if len(fn.Parameters) > 0 {
		e["parameters"] = fn.Parameters
	}
	b, err := json.Marshal(e)
	if err != nil {
		return field(name, "is not valid JSON")
	}
	ts.echoed = append(ts.echoed, b)
	return nil
}

// customParameters are the parameters a custom tool is given to the
// model with: its input, a text.
var customParameters = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string",` +
	`"description":"The tool's input, as its description says"}},"required":["input"]}`)

// addCustom adds a custom tool (a tool whose input is free text, Codex's
// apply_patch or exec): a client tool the model calls with that text as
// its one argument, input; its calls are custom_tool_call items. A
// grammar that constrains the input goes to the model in the tool's
// description, since chat completions take none. ns is the namespace tool
// it is one of ("" for none).
func (ts *toolSet) addCustom(name string, raw json.RawMessage, ns string) error {
	var ct struct {
		Type        string  `json:"type"`
		Name        string  `json:"name"`
		Description *string `json:"description"`
		Format      *struct {
			Type       string `json:"type"`
			Syntax     string `json:"syntax"`
			Definition string `json:"definition"`
		} `json:"format"`
		DeferLoading *bool `json:"defer_loading"`
	}
	if err := strict(raw, &ct); err != nil {
		return decodeItemError(name, err)
	}
	if ct.Name == "" {
		return field(name+".name", "is required")
	}
	desc := ""
	if ct.Description != nil {
		desc = *ct.Description
	}
	if f := ct.Format; f != nil && f.Type == "grammar" && f.Definition != "" {
		desc += "\n\nThe input follows this " + cmp.Or(f.Syntax, "grammar") + " grammar:\n" + f.Definition
	}
	modelName := ct.Name
	if ns != "" {
		modelName = ns + NamespaceSep + ct.Name
		if ts.namespaces == nil {
			ts.namespaces = map[string][2]string{}
		}
		ts.namespaces[modelName] = [2]string{ns, ct.Name}
	}
	if ts.custom == nil {
		ts.custom = map[string]bool{}
	}
	ts.custom[modelName] = true
	ts.fns = append(ts.fns, runspec.ClientTool{Name: &modelName, Description: &desc, Parameters: customParameters})
	if ns == "" {
		ts.echoed = append(ts.echoed, raw)
	}
	return nil
}

// additionalTools adds the tools of the additional_tools items of the
// request's input (tools Codex offers the model as it goes, in the
// input rather than in tools): as the request's own.
func (r Request) additionalTools(ts *toolSet, p *refusals) {
	var items []json.RawMessage
	if json.Unmarshal(r.Input, &items) != nil {
		return
	}
	for i, it := range items {
		var at struct {
			Type  string            `json:"type"`
			ID    *string           `json:"id"`
			Role  *string           `json:"role"`
			Tools []json.RawMessage `json:"tools"`
		}
		if json.Unmarshal(it, &at) != nil || at.Type != ItemAdditionalTools {
			continue
		}
		if err := strict(it, &at); err != nil {
			p.add(decodeItemError(fmt.Sprintf("input[%d]", i), err))
			continue
		}
		raw, _ := json.Marshal(at.Tools) // never fails
		sub := r
		sub.Tools = raw
		more := sub.functionToolsAt(p, fmt.Sprintf("input[%d].tools", i))
		ts.merge(more)
	}
}

// merge adds the tools of o to ts.
func (ts *toolSet) merge(o toolSet) {
	ts.fns = append(ts.fns, o.fns...)
	ts.approve = append(ts.approve, o.approve...)
	ts.warnings = append(ts.warnings, o.warnings...)
	for _, m := range []struct{ to, from *map[string]string }{{&ts.mcp, &o.mcp}} {
		for k, v := range *m.from {
			if *m.to == nil {
				*m.to = map[string]string{}
			}
			(*m.to)[k] = v
		}
	}
	for k, v := range o.namespaces {
		if ts.namespaces == nil {
			ts.namespaces = map[string][2]string{}
		}
		ts.namespaces[k] = v
	}
	for k := range o.custom {
		if ts.custom == nil {
			ts.custom = map[string]bool{}
		}
		ts.custom[k] = true
	}
}

// addNamespace adds a namespace tool: its functions are client tools,
// named for the model by namespace and name, and their calls carry the
// namespace.
func (ts *toolSet) addNamespace(name string, raw json.RawMessage) error {
	var nt struct {
		Type        string            `json:"type"`
		Name        string            `json:"name"`
		Description *string           `json:"description"`
		Tools       []json.RawMessage `json:"tools"`
	}
	if err := strict(raw, &nt); err != nil {
		return decodeItemError(name, err)
	}
	if nt.Name == "" || strings.Contains(nt.Name, NamespaceSep) {
		return field(name+".name", "is required, without %q", NamespaceSep)
	}
	var p refusals
	for j, t := range nt.Tools {
		var probe struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(t, &probe)
		if probe.Type == "custom" {
			p.add(ts.addCustom(fmt.Sprintf("%s.tools[%d]", name, j), t, nt.Name))
			continue
		}
		p.add(ts.addFunction(fmt.Sprintf("%s.tools[%d]", name, j), t, nt.Name))
	}
	if err := p.err(); err != nil {
		return err
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return field(name, "is not valid JSON")
	}
	ts.echoed = append(ts.echoed, b)
	return nil
}

// addHosted adds a hosted tool of type kind: the operator's tool it is
// mapped to, or nothing but a warning.
func (r Request) addHosted(ts *toolSet, name, kind string, raw json.RawMessage) {
	tool, ok := "", false
	if r.HostedTool != nil {
		tool, ok = r.HostedTool(kind)
	}
	if !ok {
		ts.warnings = append(ts.warnings, Warning{Param: name, Message: fmt.Sprintf("%s is a tool OpenAI hosts and this "+
			"server does not run (its operator maps none to it): the response goes on without it", kind)})
		return
	}
	if ts.mcp == nil {
		ts.mcp = map[string]string{}
	}
	ts.mcp[tool] = LabelAgentd
	ts.echoed = append(ts.echoed, raw)
}

// SplitNamespace returns the namespace and name of a function the model
// called by name, per the namespaces a response's request gave (ns ""
// for a function of no namespace).
func SplitNamespace(namespaces map[string][2]string, name string) (ns, fn string) {
	if v, ok := namespaces[name]; ok {
		return v[0], v[1]
	}
	return "", name
}
