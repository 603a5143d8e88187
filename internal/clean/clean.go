package clean

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// TextProblem says why s cannot be stored as text, or "" when it can.
func TextProblem(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL character"
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	return ""
}

// Text returns s as it can be stored: each NUL character and each invalid
// UTF-8 sequence becomes U+FFFD. It reports whether anything changed.
func Text(s string) (string, bool) {
	if TextProblem(s) == "" {
		return s, false
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD"), true
}

// JSONProblem says why raw, a JSON text, cannot be stored as jsonb (or
// shown in an event), or "" when it can: it is not valid JSON, not valid
// UTF-8, holds a \u0000 or a lone surrogate escape, or a number outside
// float64's range.
func JSONProblem(raw []byte) string {
	if !utf8.Valid(raw) {
		return "is not valid UTF-8"
	}
	if !json.Valid(raw) {
		return "is not valid JSON"
	}
	return scan(raw)
}

// scan finds, in valid JSON, what jsonb refuses.
func scan(raw []byte) string {
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			end, problem := scanString(raw, i+1)
			if problem != "" {
				return problem
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(raw) && strings.IndexByte("+-.eE0123456789", raw[j]) >= 0 {
				j++
			}
			if !numberFits(raw[i:j]) {
				return "holds a number outside the range of a float64"
			}
			i = j - 1
		}
	}
	return ""
}

// scanString checks the string that starts at raw[i] (after its quote) and
// returns the index of its closing quote.
func scanString(raw []byte, i int) (end int, problem string) {
	for ; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			return i, ""
		case '\\':
			if raw[i+1] != 'u' {
				i++
				continue
			}
			r := hex4(raw[i+2 : i+6])
			switch {
			case r == 0:
				return i, "holds a NUL character (\\u0000)"
			case r >= 0xDC00 && r <= 0xDFFF:
				return i, "holds a lone surrogate escape"
			case r >= 0xD800 && r <= 0xDBFF:
				if i+11 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					return i, "holds a lone surrogate escape"
				}
				if lo := hex4(raw[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return i, "holds a lone surrogate escape"
				}
				i += 6
			}
			i += 5
		}
	}
	return i, ""
}

func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

// numberFits reports whether a JSON number is within float64's range: not
// too large (jsonb's numeric would overflow past 1e131072), and not so
// small that it underflows to zero (numeric refuses past 1e-16383).
func numberFits(num []byte) bool {
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		return false
	}
	if f == 0 {
		mantissa, _, _ := bytes.Cut(bytes.ToLower(num), []byte("e"))
		return len(bytes.Trim(mantissa, "-+.0")) == 0
	}
	return true
}

// JSON returns raw as it can be stored, keeping its keys in their order and
// changing only what cannot be stored (see the package comment); it reports
// whether anything changed. Invalid JSON is an error: the caller decides
// what to store instead (a tool result that is not JSON is kept as a
// string, say).
func JSON(raw []byte) ([]byte, bool, error) {
	switch JSONProblem(raw) {
	case "":
		return raw, false, nil
	case "is not valid JSON":
		return nil, false, errors.New("not valid JSON")
	}
	if !utf8.Valid(raw) {
		raw = bytes.ToValidUTF8(raw, []byte("\uFFFD"))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out bytes.Buffer
	if err := rewrite(dec, &out); err != nil {
		return nil, false, err
	}
	return out.Bytes(), true, nil
}

// rewrite copies one JSON value from dec to out, token by token (so that
// object keys keep their order), cleaning strings and numbers.
func rewrite(dec *json.Decoder, out *bytes.Buffer) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		out.WriteByte(byte(t))
		closing := byte(']')
		if t == '{' {
			closing = '}'
		}
		for n := 0; dec.More(); n++ {
			if n > 0 {
				out.WriteByte(',')
			}
			if t == '{' {
				key, err := dec.Token()
				if err != nil {
					return err
				}
				writeString(out, key.(string))
				out.WriteByte(':')
			}
			if err := rewrite(dec, out); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return err
		}
		out.WriteByte(closing)
	case string:
		writeString(out, t)
	case json.Number:
		if numberFits([]byte(t)) {
			out.WriteString(string(t))
		} else {
			writeString(out, string(t))
		}
	case bool:
		out.WriteString(strconv.FormatBool(t))
	case nil:
		out.WriteString("null")
	}
	return nil
}

// writeString writes s, cleaned, as a JSON string. The decoder already
// turned lone surrogates into U+FFFD.
func writeString(out *bytes.Buffer, s string) {
	s, _ = Text(s)
	b, _ := json.Marshal(s)
	out.Write(b)
}
