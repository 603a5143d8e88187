package runspec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/agentd/agentd"
)

// Bounds of a run's user and memory.
const (
	// MaxUserBytes caps a run's user.
	MaxUserBytes = 256
	// MaxNamespaces caps the namespaces of each of a run's memory lists.
	MaxNamespaces = 16
	// MaxNamespaceSegments caps a namespace's segments; MaxSegmentLen a
	// segment's characters.
	MaxNamespaceSegments = 8
	MaxSegmentLen        = 128
	// MaxExtractInstructionsBytes caps memory.extract.instructions.
	MaxExtractInstructionsBytes = 16 << 10
)

// segmentRule is what a namespace's segment must match once filled.
var segmentRule = regexp.MustCompile(`^[A-Za-z0-9._:@-]{1,128}$`)

// SegmentRule says what a namespace's segment must be, for errors and docs.
const SegmentRule = "1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':', '@' and '-'"

// Memory is a run's memory as asked (an agent's definition, POST /runs):
// its namespaces are templates whose segments may hold {{user}} and the
// run's {{variables}}, filled when the run is built. Off is "memory":
// false. A nil list is none.
type Memory struct {
	Off                   bool
	Pinned, Search, Write [][]string
	Extract               *MemoryExtract
}

// MemoryExtract is a run's memory.extract as asked.
type MemoryExtract struct {
	Namespace    []string // nil: not given
	Model        *string
	Instructions *string
}

// user checks a run's user: at most MaxUserBytes of text that can be
// stored; "" (or nil) is none.
func user(u *string) (string, error) {
	if u == nil {
		return "", nil
	}
	if len(*u) > MaxUserBytes {
		return "", fieldError("user", "must be at most %d bytes", MaxUserBytes)
	}
	return *u, Storable("user", *u)
}

// memory fills the namespaces of m with the run's user and variables and
// checks them: each segment valid once filled, each write namespace
// readable (held by a pinned or searched one), and every placeholder
// given a value. nil for no memory asked.
func memory(m *Memory, user string, vars map[string]string) (*agentd.RunMemory, error) {
	if m == nil {
		return nil, nil
	}
	if m.Off {
		return &agentd.RunMemory{Off: true}, nil
	}
	fill := func(field string, ns []string) ([]string, error) { return fillNamespace(field, ns, user, vars) }
	out := &agentd.RunMemory{}
	var err error
	if out.Pinned, err = namespaces("memory.pinned", m.Pinned, fill); err != nil {
		return nil, err
	}
	if out.Search, err = namespaces("memory.search", m.Search, fill); err != nil {
		return nil, err
	}
	if out.Write, err = namespaces("memory.write", m.Write, fill); err != nil {
		return nil, err
	}
	if err := writesReadable(out.Write, out); err != nil {
		return nil, err
	}
	if out.Extract, err = extract(m.Extract, fill); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckMemory checks the memory of an agent's definition, whose runs'
// users and variables are not known yet: each namespace's shape, each
// segment valid with its placeholders put aside, and each write namespace
// readable as the templates stand.
func CheckMemory(m *Memory) error {
	if m == nil || m.Off {
		return nil
	}
	fill := func(field string, ns []string) ([]string, error) {
		out := make([]string, len(ns))
		for i, s := range ns {
			if err := checkSegment(fmt.Sprintf("%s[%d]", field, i), placeholder.ReplaceAllString(s, "x")); err != nil {
				return nil, err
			}
			if err := checkPlaceholders(fmt.Sprintf("%s[%d]", field, i), s); err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	}
	mem := &agentd.RunMemory{}
	var err error
	if mem.Pinned, err = namespaces("memory.pinned", m.Pinned, fill); err != nil {
		return err
	}
	if mem.Search, err = namespaces("memory.search", m.Search, fill); err != nil {
		return err
	}
	if mem.Write, err = namespaces("memory.write", m.Write, fill); err != nil {
		return err
	}
	if err := writesReadable(mem.Write, mem); err != nil {
		return err
	}
	_, err = extract(m.Extract, fill)
	return err
}

// namespaces checks and fills one list of a run's memory.
func namespaces(field string, list [][]string, fill func(string, []string) ([]string, error)) ([][]string, error) {
	if len(list) > MaxNamespaces {
		return nil, fieldError(field, "must hold at most %d namespaces", MaxNamespaces)
	}
	if list == nil {
		return nil, nil
	}
	out := make([][]string, 0, len(list))
	for i, ns := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		if len(ns) == 0 || len(ns) > MaxNamespaceSegments {
			return nil, fieldError(f, "must have from 1 to %d segments", MaxNamespaceSegments)
		}
		filled, err := fill(f, ns)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(out, func(o []string) bool { return slices.Equal(o, filled) }) {
			out = append(out, filled)
		}
	}
	return out, nil
}

// writesReadable refuses a write namespace that the run could not read
// back: none of its pinned or searched namespaces holds it.
func writesReadable(write [][]string, m *agentd.RunMemory) error {
	for i, w := range write {
		if !m.Readable(w) {
			return fieldError(fmt.Sprintf("memory.write[%d]", i), "%q is not readable by the run: list it (or a namespace "+
				"that holds it) in memory.pinned or memory.search too", strings.Join(w, "/"))
		}
	}
	return nil
}

// extract checks and fills memory.extract.
func extract(e *MemoryExtract, fill func(string, []string) ([]string, error)) (*agentd.RunMemoryExtract, error) {
	if e == nil {
		return nil, nil
	}
	const field = "memory.extract"
	if len(e.Namespace) == 0 || len(e.Namespace) > MaxNamespaceSegments {
		return nil, fieldError(field+".namespace", "is required: a namespace of from 1 to %d segments", MaxNamespaceSegments)
	}
	ns, err := fill(field+".namespace", e.Namespace)
	if err != nil {
		return nil, err
	}
	out := &agentd.RunMemoryExtract{Namespace: ns}
	if e.Model != nil {
		if strings.TrimSpace(*e.Model) == "" || len(*e.Model) > MaxModelLen {
			return nil, fieldError(field+".model", "must be a non-empty string of at most %d bytes", MaxModelLen)
		}
		if err := Storable(field+".model", *e.Model); err != nil {
			return nil, err
		}
		out.Model = *e.Model
	}
	if e.Instructions != nil {
		if len(*e.Instructions) > MaxExtractInstructionsBytes {
			return nil, fieldError(field+".instructions", "must be at most %d bytes", MaxExtractInstructionsBytes)
		}
		if err := Storable(field+".instructions", *e.Instructions); err != nil {
			return nil, err
		}
		out.Instructions = *e.Instructions
	}
	return out, nil
}

// fillNamespace puts the run's user and variables into the placeholders
// of namespace ns, at field: {{user}} is the run's user, any other
// {{name}} the run's variable of that name. Each segment must be valid
// once filled: a value cannot add a segment, or reach outside its own.
func fillNamespace(field string, ns []string, user string, vars map[string]string) ([]string, error) {
	out := make([]string, len(ns))
	for i, s := range ns {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := checkPlaceholders(f, s); err != nil {
			return nil, err
		}
		var missing error
		filled := placeholder.ReplaceAllStringFunc(s, func(m string) string {
			name := strings.TrimSpace(m[2 : len(m)-2])
			if name == "user" {
				if user == "" && missing == nil {
					missing = fieldError(field, "uses {{user}}, and the run has no user: send its end user as \"user\"")
				}
				return user
			}
			v, ok := vars[name]
			if !ok && missing == nil {
				missing = fieldError(field, "uses {{%s}}, and the run has no variable %q", name, name)
			}
			return v
		})
		if missing != nil {
			return nil, missing
		}
		if err := checkSegment(f, filled); err != nil {
			return nil, err
		}
		out[i] = filled
	}
	return out, nil
}

// checkPlaceholders refuses braces in segment s that are not a
// placeholder ({{name}}).
func checkPlaceholders(field, s string) error {
	if rest := placeholder.ReplaceAllString(s, ""); strings.ContainsAny(rest, "{}") {
		return fieldError(field, "has braces that are not a placeholder: a placeholder is {{name}}")
	}
	return nil
}

// checkSegment checks a filled segment.
func checkSegment(field, s string) error {
	if !segmentRule.MatchString(s) {
		shown := s
		if len(shown) > 64 {
			shown = shown[:64] + "…"
		}
		return fieldError(field, "must be %s once filled, not %q", SegmentRule, shown)
	}
	return nil
}
