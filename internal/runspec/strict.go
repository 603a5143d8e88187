package runspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
)

// ErrTrailing is DecodeStrict's error for data that holds more than one
// JSON value.
var ErrTrailing = errors.New("more than one JSON value")

// strictCopyMax is the size up to which DecodeStrict decodes through a
// json.Decoder, which copies what it decodes into a buffer of its own
// (that grows by doubling): past it, the copy is of data's skeleton.
const strictCopyMax = 64 << 10

// longString is the length past which a string value is left out of the
// skeleton that DecodeStrict checks.
const longString = 1 << 10

// DecodeStrict decodes exactly one JSON value from data into v, refusing
// object keys that v does not have, with encoding/json's errors (whose
// messages the doors turn into problems), or ErrTrailing. For large data
// (a run's input with images in base64) it does not copy data: it checks
// the keys and types on data's skeleton, its long string values emptied,
// and then decodes data itself with json.Unmarshal.
func DecodeStrict(data []byte, v any) error {
	if len(data) <= strictCopyMax {
		return decodeStrict(data, v)
	}
	// Unmarshal checks the syntax of all of data first (and skips the
	// values of the keys an empty struct lacks, allocating nothing).
	var syntax *json.SyntaxError
	if err := json.Unmarshal(data, new(struct{})); errors.As(err, &syntax) {
		if strings.HasSuffix(syntax.Error(), "after top-level value") {
			return ErrTrailing
		}
		return err
	}
	skeleton := skeletonOf(data)
	if err := decodeStrict(skeleton, newLike(v)); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// newLike is a new zero value of what v points to.
func newLike(v any) any { return reflect.New(reflect.TypeOf(v).Elem()).Interface() }

// decodeStrict is DecodeStrict through a json.Decoder.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailing
	}
	return nil
}

// skeletonOf is valid JSON data with each string value (not an object's
// key) longer than longString replaced by "".
func skeletonOf(data []byte) []byte {
	out := make([]byte, 0, 4<<10)
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			out = append(out, data[i])
			continue
		}
		end := StringEnd(data, i)
		j := end + 1
		for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r') {
			j++
		}
		if end-i-1 > longString && (j == len(data) || data[j] != ':') {
			out = append(out, '"', '"')
		} else {
			out = append(out, data[i:end+1]...)
		}
		i = end
	}
	return out
}

// StringEnd is the index of the quote that closes the JSON string that
// opens at data[start] (len(data)-1 when it is not closed).
func StringEnd(data []byte, start int) int {
	for i := start + 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(data) - 1
}

// SplitArray is the elements of JSON array raw, each a slice of raw (no
// copy, unlike json.Unmarshal into []json.RawMessage: an element may be
// an image tens of megabytes long); false when raw is not an array.
func SplitArray(raw []byte) ([]json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '[' || !json.Valid(raw) {
		return nil, false
	}
	var items []json.RawMessage
	depth, start := 0, 1
	for i := 1; i < len(raw)-1; i++ {
		switch raw[i] {
		case '"':
			i = StringEnd(raw, i)
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, bytes.TrimSpace(raw[start:i]))
				start = i + 1
			}
		}
	}
	if last := bytes.TrimSpace(raw[start : len(raw)-1]); len(last) > 0 || len(items) > 0 {
		items = append(items, last)
	}
	return items, true
}
