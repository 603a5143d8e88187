package responses

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	"github.com/agentd/agentd/internal/runspec"
)

// refusals gathers what a request is refused for, so that one 400 names
// every refused field: its param the first, its message all of them.
type refusals struct {
	fields []*runspec.FieldError
	other  error // an error that names no field: returned alone
}

// add keeps err (nil is nothing) and reports whether it was one.
func (p *refusals) add(err error) bool {
	if err == nil {
		return false
	}
	var fe *runspec.FieldError
	switch {
	case errors.As(err, &fe):
		for _, f := range p.fields {
			if f.Field == fe.Field {
				return true // one refusal per field
			}
		}
		p.fields = append(p.fields, fe)
	case p.other == nil:
		p.other = err
	}
	return true
}

// err is the request's one error: nil when nothing was refused; the only
// refusal; or the first, its message followed by the others.
func (p *refusals) err() error {
	switch {
	case p.other != nil:
		return p.other
	case len(p.fields) == 0:
		return nil
	case len(p.fields) == 1:
		return p.fields[0]
	}
	var b strings.Builder
	b.WriteString(p.fields[0].Message)
	b.WriteString(" (and ")
	for i, f := range p.fields[1:] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f.Field)
		b.WriteString(": ")
		b.WriteString(f.Message)
	}
	b.WriteString(")")
	return &runspec.FieldError{Field: p.fields[0].Field, Message: b.String()}
}

// objectKeys returns the keys of the JSON object raw in the order they
// come (ok false: raw is not an object).
func objectKeys(raw []byte) (keys []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		k, _ := t.(string)
		keys = append(keys, k)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, false
		}
	}
	return keys, true
}

// jsonFields are the JSON names of struct type t's fields.
func jsonFields(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// unknownFields returns body without the fields of a create request that
// agentd does not know (at the top, or in text and prompt), and a refusal
// naming each of them in the order they come.
func unknownFields(body []byte, p *refusals) []byte {
	keys, ok := objectKeys(body)
	if !ok {
		return body
	}
	known := jsonFields(reflect.TypeFor[Request]())
	var top map[string]json.RawMessage
	drop := false
	for _, k := range keys {
		switch {
		case !known[k]:
			p.add(field(k, "is not a field of a response request that agentd knows"))
			drop = true
		case k == "text" || k == "prompt":
			if top == nil && json.Unmarshal(body, &top) != nil {
				return body
			}
			if inner, changed := unknownInner(k, top[k], p); changed {
				top[k] = inner
				drop = true
			}
		}
	}
	if !drop {
		return body
	}
	if top == nil && json.Unmarshal(body, &top) != nil {
		return body
	}
	for _, k := range keys {
		if !known[k] {
			delete(top, k)
		}
	}
	out, err := json.Marshal(top)
	if err != nil {
		return body
	}
	return out
}

// unknownInner refuses the fields of object field name (text or prompt)
// that agentd does not know, returning the object without them.
func unknownInner(name string, raw json.RawMessage, p *refusals) (json.RawMessage, bool) {
	keys, ok := objectKeys(raw)
	if !ok {
		return raw, false
	}
	st := reflect.TypeFor[Request]()
	f, _ := st.FieldByName(map[string]string{"text": "Text", "prompt": "Prompt"}[name])
	known := jsonFields(f.Type.Elem())
	var obj map[string]json.RawMessage
	changed := false
	for _, k := range keys {
		if known[k] {
			continue
		}
		p.add(field(name+"."+k, "is not a field of a response request that agentd knows"))
		if obj == nil && json.Unmarshal(raw, &obj) != nil {
			return raw, false
		}
		delete(obj, k)
		changed = true
	}
	if !changed {
		return raw, false
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return raw, false
	}
	return out, true
}
