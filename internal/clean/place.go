package clean

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A Place is where a value sits in a JSON text: the keys (string) and
// array indexes (int) that lead to it from the text's root, which is the
// empty Place.
type Place []any

// String writes p as a request's JSON names a field: input[2].content,
// metadata.user.
func (p Place) String() string {
	var b strings.Builder
	for _, step := range p {
		switch s := step.(type) {
		case int:
			b.WriteString("[" + strconv.Itoa(s) + "]")
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		}
	}
	return b.String()
}

// StringProblem finds, in the JSON text raw, the first string (a value or
// an object's key) that a JSON decoder would not give back as it was
// written: one that is not valid UTF-8, or that holds the \u escape of a
// lone surrogate. Go's encoding/json (like most decoders) turns both into
// U+FFFD without a word, so a caller that stores decoded text as the
// client's own checks the text first. It returns where the string is (for
// a key, the object that holds it) and what is wrong with it, or "" when
// every string decodes as it was written, and also when raw is not valid
// JSON (the decoder says why). NUL characters and numbers decode as
// written: TextProblem and JSONProblem are the checks for them.
func StringProblem(raw []byte) (Place, string) {
	if utf8.Valid(raw) && !bytes.Contains(raw, []byte(`\u`)) {
		return nil, "" // the usual body: nothing to look for
	}
	if !json.Valid(raw) {
		return nil, ""
	}
	w := walker{raw: raw}
	if w.value() {
		return nil, ""
	}
	return w.place(), w.problem
}

// walker walks a valid JSON text in search of a string that does not
// decode as written, keeping the path to the value it is in.
type walker struct {
	raw     []byte
	i       int
	path    []step
	problem string
}

// step is one step of a walker's path: an object's key, as written
// between its quotes, or an array's index (key nil).
type step struct {
	key   []byte
	index int
}

// place returns the walker's path as a Place, each key decoded.
func (w *walker) place() Place {
	p := make(Place, 0, len(w.path))
	for _, s := range w.path {
		if s.key == nil {
			p = append(p, s.index)
			continue
		}
		var k string
		if json.Unmarshal(append(append([]byte{'"'}, s.key...), '"'), &k) != nil {
			k = string(s.key)
		}
		p = append(p, k)
	}
	return p
}

// value walks the value at w.i and leaves w.i after it; false: it found a
// problem (w.problem), and w.path leads to it.
func (w *walker) value() bool {
	w.space()
	switch w.raw[w.i] {
	case '{':
		return w.container('}', true)
	case '[':
		return w.container(']', false)
	case '"':
		_, problem := w.str()
		w.problem = problem
		return problem == ""
	}
	for w.i < len(w.raw) && strings.IndexByte(",]} \t\r\n", w.raw[w.i]) < 0 {
		w.i++ // a number, true, false or null
	}
	return true
}

// container walks the object or array whose opening delimiter is at w.i,
// up to its closing delimiter end.
func (w *walker) container(end byte, object bool) bool {
	w.i++
	for n := 0; ; n++ {
		w.space()
		if w.raw[w.i] == end {
			w.i++
			return true
		}
		if w.raw[w.i] == ',' {
			w.i++
			w.space()
		}
		s := step{index: n}
		if object {
			key, problem := w.str()
			if problem != "" {
				w.problem = "has a key that " + problem
				return false
			}
			s.key = key
			w.space()
			w.i++ // the colon
		}
		w.path = append(w.path, s)
		if !w.value() {
			return false
		}
		w.path = w.path[:len(w.path)-1]
	}
}

// str reads the string whose opening quote is at w.i: its content as
// written, and what keeps it from decoding as written ("" when nothing).
func (w *walker) str() (content []byte, problem string) {
	raw, start := w.raw, w.i+1
	for i := start; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			w.i = i + 1
			if !utf8.Valid(raw[start:i]) {
				return raw[start:i], "is not valid UTF-8"
			}
			return raw[start:i], ""
		case '\\':
			if raw[i+1] != 'u' {
				i++
				continue
			}
			switch r := hex4(raw[i+2 : i+6]); {
			case r >= 0xDC00 && r <= 0xDFFF:
				return nil, "holds a lone surrogate escape"
			case r >= 0xD800 && r <= 0xDBFF:
				if i+11 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					return nil, "holds a lone surrogate escape"
				}
				if lo := hex4(raw[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return nil, "holds a lone surrogate escape"
				}
				i += 6
			}
			i += 5
		}
	}
	return nil, "is not a closed string" // not reached in valid JSON
}

// space moves w.i past white space.
func (w *walker) space() {
	for w.i < len(w.raw) && strings.IndexByte(" \t\r\n", w.raw[w.i]) >= 0 {
		w.i++
	}
}
