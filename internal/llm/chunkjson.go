package llm

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// decodeTextChunk decodes a Chat Completions stream chunk of the common
// kind, text deltas and finish reasons, into c without encoding/json's
// reflection, which took a tenth of agentd's CPU while answers stream. It
// says false, with c in any state, for anything else: tool calls, usage, an
// error, a key that differs from a known one in case only (encoding/json
// matches those), a repeated key, JSON it does not read as valid, a number
// where one is kept that is not a plain integer. The caller then decodes the
// chunk with encoding/json, so that what c holds never depends on which
// decoder read it (FuzzDecodeTextChunk holds it to that).
func decodeTextChunk(data []byte, c *chunk) bool {
	*c = chunk{}
	d := chunkDecoder{b: data}
	ok := d.object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			return d.choices(c)
		case "usage", "error": // a chunk with usage, or an error event, goes the slow way
			return d.null()
		default:
			return !foldsTo(key, "choices", "usage", "error") && d.skip(0)
		}
	})
	d.space()
	return ok && d.i == len(d.b)
}

// foldsTo says whether key matches one of names in encoding/json's way
// (case-insensitively) without being it.
func foldsTo(key []byte, names ...string) bool {
	for _, n := range names {
		if string(key) != n && bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// chunkDecoder reads JSON text from b at i.
type chunkDecoder struct {
	b []byte
	i int
}

func (d *chunkDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

// peek returns the next byte after white space, 0 at the end.
func (d *chunkDecoder) peek() byte {
	d.space()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *chunkDecoder) literal(word string) bool {
	d.space()
	if len(d.b)-d.i < len(word) || string(d.b[d.i:d.i+len(word)]) != word { // compared, not copied
		return false
	}
	d.i += len(word)
	return true
}

func (d *chunkDecoder) null() bool { return d.literal("null") }

// object reads an object, calling member for each key with d before the
// key's value, which member reads. A key seen twice fails.
func (d *chunkDecoder) object(member func(key []byte) bool) bool {
	if d.peek() != '{' {
		return false
	}
	d.i++
	if d.peek() == '}' {
		d.i++
		return true
	}
	var seen [16][]byte // keys seen: a chunk's objects have fewer
	n := 0
	for {
		key, ok := d.key()
		if !ok || d.peek() != ':' || n == len(seen) {
			return false
		}
		for _, k := range seen[:n] {
			if bytes.Equal(k, key) {
				return false
			}
		}
		seen[n] = key
		n++
		d.i++
		if !member(key) {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// array reads an array, calling elem for each element.
func (d *chunkDecoder) array(elem func() bool) bool {
	if d.peek() != '[' {
		return false
	}
	d.i++
	if d.peek() == ']' {
		d.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return true
		default:
			return false
		}
	}
}

// key reads an object's key, as it stands: one with escapes (which
// encoding/json would unquote before matching it) fails.
func (d *chunkDecoder) key() ([]byte, bool) {
	raw, escaped, ok := d.rawString()
	if !ok || escaped || !utf8.Valid(raw) {
		return nil, false
	}
	return raw, true
}

// str reads a string. One without escapes is taken as it stands, as
// encoding/json takes it when its UTF-8 is valid; one with escapes is
// unquoted by encoding/json.
func (d *chunkDecoder) str() (string, bool) {
	raw, escaped, ok := d.rawString()
	switch {
	case !ok:
		return "", false
	case escaped:
		var s string
		if json.Unmarshal(d.b[d.i-len(raw)-2:d.i], &s) != nil { // with its quotes
			return "", false
		}
		return s, true
	case !utf8.Valid(raw):
		return "", false
	}
	return string(raw), true
}

// rawString reads a string and returns what is between its quotes, and
// whether it holds escapes (which it does not check).
func (d *chunkDecoder) rawString() (raw []byte, escaped, ok bool) {
	if d.peek() != '"' {
		return nil, false, false
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], escaped, true
		case c == '\\':
			escaped = true
			d.i += 2
		case c < 0x20:
			return nil, false, false
		default:
			d.i++
		}
	}
	return nil, false, false
}

// choices reads the chunk's choices into c.
func (d *chunkDecoder) choices(c *chunk) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	return d.array(func() bool {
		c.Choices = append(c.Choices, chunkChoice{})
		ch := &c.Choices[len(c.Choices)-1]
		if d.peek() == 'n' {
			return d.null()
		}
		return d.object(func(key []byte) bool {
			switch string(key) {
			case "index":
				return d.integer(&ch.Index)
			case "delta":
				return d.delta(ch)
			case "finish_reason":
				return d.nullOrString(&ch.FinishReason)
			default:
				return !foldsTo(key, "index", "delta", "finish_reason") && d.skip(0)
			}
		})
	})
}

// delta reads a choice's delta: its text; tool calls go the slow way.
func (d *chunkDecoder) delta(ch *chunkChoice) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	return d.object(func(key []byte) bool {
		switch string(key) {
		case "content":
			return d.nullOrString(&ch.Delta.Content)
		case "tool_calls":
			return d.null()
		default:
			return !foldsTo(key, "content", "tool_calls") && d.skip(0)
		}
	})
}

// nullOrString reads a string into s, or null (s unchanged).
func (d *chunkDecoder) nullOrString(s *string) bool {
	if d.peek() == 'n' {
		return d.null()
	}
	v, ok := d.str()
	if ok {
		*s = v
	}
	return ok
}

// integer reads a plain integer of at most 18 digits into n, or null (n
// unchanged).
func (d *chunkDecoder) integer(n *int64) bool {
	c := d.peek() // 0 at the end
	if c == 'n' {
		return d.null()
	}
	neg := c == '-'
	if neg {
		d.i++
	}
	start := d.i
	var v int64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		v = v*10 + int64(d.b[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	if digits == 0 || digits > 18 || (digits > 1 && d.b[start] == '0') {
		return false
	}
	if d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return false // not an int64 to encoding/json
	}
	if neg {
		v = -v
	}
	*n = v
	return true
}

// maxSkipDepth bounds the nesting of a value skipped; deeper goes the slow
// way.
const maxSkipDepth = 32

// skip reads a value of any kind, at nesting depth, and drops it.
func (d *chunkDecoder) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch c := d.peek(); {
	case c == '"': // dropped: not copied, and its UTF-8 not checked (encoding/json mends it)
		raw, escaped, ok := d.rawString()
		return ok && (!escaped || json.Valid(d.b[d.i-len(raw)-2:d.i]))
	case c == '{':
		return d.object(func([]byte) bool { return d.skip(depth + 1) })
	case c == '[':
		return d.array(func() bool { return d.skip(depth + 1) })
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.null()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return false
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *chunkDecoder) number() bool {
	if d.b[d.i] == '-' {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if d.digits() == 0 {
		return false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if d.digits() == 0 {
			return false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if d.digits() == 0 {
			return false
		}
	}
	return true
}

// digits reads decimal digits and says how many.
func (d *chunkDecoder) digits() int {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i - start
}
