package compose

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentd/agentd/internal/runspec"
)

// memoryFields are a run's memory as agentd's JSON asks for it: an agent's
// definition, POST /runs, a schedule's template. A namespace is a list of
// segments (["users", "{{user}}", "profile"]), as LangGraph's Store has
// it, or the same as a path ("users/{{user}}/profile").
type memoryFields struct {
	Pinned  []json.RawMessage `json:"pinned"`
	Search  []json.RawMessage `json:"search"`
	Write   []json.RawMessage `json:"write"`
	Extract *struct {
		Namespace    json.RawMessage `json:"namespace"`
		Model        *string         `json:"model"`
		Instructions *string         `json:"instructions"`
	} `json:"extract"`
}

// parseMemory reads a "memory" field: false (memory off for the run), or
// an object of namespaces; nil for nothing (or null).
func parseMemory(raw json.RawMessage) (*runspec.Memory, error) {
	if runspec.IsNull(raw) {
		return nil, nil
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case bytes.Equal(raw, []byte("false")):
		return &runspec.Memory{Off: true}, nil
	case raw[0] != '{':
		return nil, fieldError("memory", "must be false (no memory for the run) or an object: {\"pinned\", \"search\", \"write\", \"extract\"}")
	}
	var f memoryFields
	if err := decodeField(raw, &f, "memory"); err != nil {
		return nil, err
	}
	m := &runspec.Memory{}
	var err error
	if m.Pinned, err = namespaceList("memory.pinned", f.Pinned); err != nil {
		return nil, err
	}
	if m.Search, err = namespaceList("memory.search", f.Search); err != nil {
		return nil, err
	}
	if m.Write, err = namespaceList("memory.write", f.Write); err != nil {
		return nil, err
	}
	if e := f.Extract; e != nil {
		m.Extract = &runspec.MemoryExtract{Model: e.Model, Instructions: e.Instructions}
		if !runspec.IsNull(e.Namespace) {
			if m.Extract.Namespace, err = namespace("memory.extract.namespace", e.Namespace); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// namespaceList reads a list of namespaces at field.
func namespaceList(field string, list []json.RawMessage) ([][]string, error) {
	if list == nil {
		return nil, nil
	}
	out := make([][]string, len(list))
	for i, raw := range list {
		ns, err := namespace(fmt.Sprintf("%s[%d]", field, i), raw)
		if err != nil {
			return nil, err
		}
		out[i] = ns
	}
	return out, nil
}

// namespace reads one namespace: a list of strings, or a path of them
// apart by "/".
func namespace(field string, raw json.RawMessage) ([]string, error) {
	var path string
	if json.Unmarshal(raw, &path) == nil {
		return strings.Split(path, "/"), nil
	}
	var segs []string
	if err := json.Unmarshal(raw, &segs); err != nil {
		return nil, fieldError(field, "must be a namespace: a list of strings, such as [\"users\", \"{{user}}\"], or a path, such as \"users/{{user}}\"")
	}
	return segs, nil
}
