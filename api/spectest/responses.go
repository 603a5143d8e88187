package spectest

// Responses: CheckResponse holds each answer a test receives to what
// openapi.yaml's paths say of it: its status, its media type and, for JSON,
// its body (objects closed, as for events).

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// pathItem is one entry of the spec's paths.
type pathItem struct {
	template string                // e.g. /runs/{id}/events
	segs     []string              // template split at "/"
	ops      map[string]*operation // by method, upper case
}

// operation is one operation of a pathItem.
type operation struct {
	route     string               // "GET /runs/{id}", as api.RouteScopes names it
	responses map[string]*response // by status ("200"), range ("4XX") or "default"
}

// response is one response of an operation, its $ref followed.
type response struct {
	ptr string // JSON pointer of the response object, e.g. /components/responses/Problem
	// content maps each declared media type to the JSON pointer of the
	// schema of its body; "" for a media type whose body is not checked (not
	// JSON, or no schema). Empty when the response has no body.
	content map[string]string
}

// problemPtr is the schema of what no operation answers.
const problemPtr = "/components/schemas/Problem"

// httpMethods are the fields of a path item that are operations.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// indexPaths indexes the operations of doc's paths, with their responses and
// the JSON pointer of each JSON response's schema.
func indexPaths(doc any) ([]*pathItem, error) {
	paths, ok := dig(doc, "paths").(map[string]any)
	if !ok || len(paths) == 0 {
		return nil, errors.New("openapi.yaml has no paths")
	}
	var items []*pathItem
	for _, template := range slices.Sorted(maps.Keys(paths)) {
		item := &pathItem{template: template, segs: strings.Split(template, "/"), ops: map[string]*operation{}}
		for _, m := range httpMethods {
			responses, ok := dig(paths, template, m, "responses").(map[string]any)
			if !ok {
				continue
			}
			op := &operation{route: strings.ToUpper(m) + " " + template, responses: map[string]*response{}}
			for code := range responses {
				ptr, r, err := follow(doc, pointer("paths", template, m, "responses", code))
				if err != nil {
					return nil, fmt.Errorf("%s, response %s: %w", op.route, code, err)
				}
				resp := &response{ptr: ptr, content: map[string]string{}}
				content, _ := dig(r, "content").(map[string]any)
				for mt := range content {
					resp.content[mt] = ""
					if isJSON(mt) && dig(content, mt, "schema") != nil {
						resp.content[mt] = ptr + pointer("content", mt, "schema")
					}
				}
				op.responses[code] = resp
			}
			item.ops[strings.ToUpper(m)] = op
		}
		items = append(items, item)
	}
	return items, nil
}

// compiled is the outcome of compiling one schema.
type compiled struct {
	schema *jsonschema.Schema
	err    error
}

// schemaAt returns the schema at the JSON pointer ptr of the spec, compiled
// on the first call for ptr; the outcome, error included, is kept.
func (s *specSchemas) schemaAt(ptr string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.compiled[ptr]
	if !ok {
		got.schema, got.err = s.c.Compile(docURL + "#" + fragment(ptr))
		if got.err != nil {
			got.err = fmt.Errorf("openapi.yaml: compile %s: %w", ptr, got.err)
		}
		s.compiled[ptr] = got
	}
	return got.schema, got.err
}

// pointer is the JSON pointer (RFC 6901) of the keys.
func pointer(keys ...string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// fragment is ptr as a URI fragment, each token percent-encoded (the
// compiler percent-decodes fragments: /runs/{id} must reach it whole).
func fragment(ptr string) string {
	toks := strings.Split(ptr, "/")
	for i, tok := range toks {
		toks[i] = url.PathEscape(tok)
	}
	return strings.Join(toks, "/")
}

// lookup is the value at ptr in doc, or nil.
func lookup(doc any, ptr string) any {
	if ptr == "" {
		return doc
	}
	toks := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
	for i, tok := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	return dig(doc, toks...)
}

// follow returns the object at ptr, following its $ref (a local one, such as
// #/components/responses/Problem) as often as it has one, and the pointer it
// ends at.
func follow(doc any, ptr string) (string, map[string]any, error) {
	for range 10 {
		v, ok := lookup(doc, ptr).(map[string]any)
		if !ok {
			return "", nil, fmt.Errorf("%s is no object", ptr)
		}
		ref, isRef := v["$ref"].(string)
		if !isRef {
			return ptr, v, nil
		}
		frag, ok := strings.CutPrefix(ref, "#")
		if !ok {
			return "", nil, fmt.Errorf("%s: $ref %q is not local", ptr, ref)
		}
		if frag, err := url.PathUnescape(frag); err == nil {
			ptr = frag
		} else {
			return "", nil, fmt.Errorf("%s: $ref %q: %w", ptr, ref, err)
		}
	}
	return "", nil, fmt.Errorf("%s: $ref upon $ref, 10 deep", ptr)
}

// isJSON reports whether the media type mt is JSON (application/json or a
// +json type such as application/problem+json).
func isJSON(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// find returns the operation for method on path (no query string), or nil
// when the spec has none: no template matches path, or the one that does
// has no such method. A template segment {name} matches any one non-empty
// segment; when several templates match, the one with the most literal
// segments wins.
func (s *specSchemas) find(method, path string) *operation {
	segs := strings.Split(path, "/")
	var best *pathItem
	bestLiterals := -1
	for _, item := range s.paths {
		if len(item.segs) != len(segs) {
			continue
		}
		literals := 0
		for i, ts := range item.segs {
			if strings.HasPrefix(ts, "{") && strings.HasSuffix(ts, "}") {
				if segs[i] == "" {
					literals = -1
					break
				}
				continue
			}
			if ts != segs[i] {
				literals = -1
				break
			}
			literals++
		}
		if literals > bestLiterals {
			best, bestLiterals = item, literals
		}
	}
	if best == nil {
		return nil
	}
	return best.ops[method]
}

// response returns op's response for status: the exact code, else its range
// ("4XX"), else default.
func (op *operation) response(status int) (*response, bool) {
	for _, k := range []string{strconv.Itoa(status), strconv.Itoa(status/100) + "XX", "default"} {
		if r, ok := op.responses[k]; ok {
			return r, true
		}
	}
	return nil, false
}

// schemaFor returns the schema pointer of the declared media type that mt
// is (an exact entry, else type/*, else */*); ok is false when none is
// declared.
func (r *response) schemaFor(mt string) (ptr string, ok bool) {
	typ, _, _ := strings.Cut(mt, "/")
	for _, k := range []string{mt, typ + "/*", "*/*"} {
		if ptr, ok := r.content[k]; ok {
			return ptr, true
		}
	}
	return "", false
}

// declared lists r's media types, for messages.
func (r *response) declared() string {
	if len(r.content) == 0 {
		return "no body"
	}
	return strings.Join(slices.Sorted(maps.Keys(r.content)), ", ")
}

// CheckResponse fails t unless an answer, as a client received it, is one
// that openapi.yaml describes:
//   - the operation is the one of the spec's paths whose template matches
//     path (its query string, if any, left out) for method;
//   - status is declared by the operation, as itself, its range (4XX) or
//     default, whose $ref is followed;
//   - the Content-Type is a media type that response declares, and a
//     response that declares none has no body;
//   - a JSON body (application/json, application/problem+json) is valid
//     against the media type's schema, objects taken as closed, as events
//     are. Other bodies (text/event-stream, text/plain) are not read: their
//     media type being declared is all.
//
// An answer for which the spec has no operation (the router's 404 for an
// unknown route, 405 for an unknown method, a CORS preflight) must have no
// body or be an application/problem+json Problem.
func CheckResponse(t testing.TB, method, path string, status int, header http.Header, body []byte) {
	t.Helper()
	s, err := schemas()
	if err != nil {
		t.Errorf("spectest: %v", err)
		return
	}
	route, err := s.checkResponse(method, path, status, header, body)
	if err != nil {
		answer := strconv.Itoa(status)
		if ct := header.Get("Content-Type"); ct != "" {
			answer += " " + ct
		}
		t.Errorf("%s %s (%s) answered %s, which does not match openapi.yaml: %s\nbody: %s",
			method, path, route, answer, explain(err), excerpt(body))
	}
}

// checkResponse is CheckResponse; route is the operation's, or says there is
// none.
func (s *specSchemas) checkResponse(method, path string, status int, header http.Header, body []byte) (route string, err error) {
	method = strings.ToUpper(method)
	path, _, _ = strings.Cut(path, "?")
	path, _, _ = strings.Cut(path, "#")
	lookupMethod := method
	if method == http.MethodHead {
		lookupMethod = http.MethodGet
	}
	op := s.find(lookupMethod, path)
	if op == nil {
		const none = "no operation of openapi.yaml; checked as a Problem"
		if len(body) == 0 {
			return none, nil
		}
		if mt := mediaType(header); mt != "application/problem+json" {
			return none, fmt.Errorf("the spec has no operation for it, so it may only answer a Problem (application/problem+json), not %q", mt)
		}
		return none, s.validate(problemPtr, body)
	}
	r, ok := op.response(status)
	if !ok {
		return op.route, fmt.Errorf("status %d is not declared (the operation declares %s) and there is no default",
			status, strings.Join(slices.Sorted(maps.Keys(op.responses)), ", "))
	}
	if method == http.MethodHead {
		return op.route, nil
	}
	if len(body) == 0 {
		if len(r.content) == 0 {
			return op.route, nil
		}
		return op.route, fmt.Errorf("no body, but the response (%s) declares %s", r.ptr, r.declared())
	}
	if len(r.content) == 0 {
		return op.route, fmt.Errorf("a body, but the response (%s) declares none", r.ptr)
	}
	mt := mediaType(header)
	if mt == "" {
		return op.route, fmt.Errorf("a body without a Content-Type; the response (%s) declares %s", r.ptr, r.declared())
	}
	ptr, ok := r.schemaFor(mt)
	if !ok {
		return op.route, fmt.Errorf("media type %q is not declared; the response (%s) declares %s", mt, r.ptr, r.declared())
	}
	if ptr == "" {
		return op.route, nil // not JSON: its media type is declared, and that is all that is checked
	}
	return op.route, s.validate(ptr, body)
}

// mediaType is the media type of header's Content-Type, without parameters,
// in lower case; the raw value when it does not parse.
func mediaType(header http.Header) string {
	ct := header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil {
		return mt
	}
	return ct
}

// validate checks body, one JSON value, against the schema at ptr.
func (s *specSchemas) validate(ptr string, body []byte) error {
	sch, err := s.schemaAt(ptr)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not one JSON value: %w", err)
	}
	return sch.Validate(v)
}

// maxExcerpt is how much of a body a message quotes.
const maxExcerpt = 1000

// excerpt is body for a message, cut to maxExcerpt bytes.
func excerpt(body []byte) string {
	if len(body) == 0 {
		return "(none)"
	}
	if len(body) <= maxExcerpt {
		return string(body)
	}
	return fmt.Sprintf("%s… (%d bytes in all)", body[:maxExcerpt], len(body))
}
