package runspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestDecodeStrict: past strictCopyMax, DecodeStrict refuses what the
// json.Decoder path refuses (an unknown key, a wrong type, a second
// value, bad syntax at its offset) and decodes the rest the same.
func TestDecodeStrict(t *testing.T) {
	type part struct {
		URL  string `json:"url"`
		Kind int    `json:"kind"`
	}
	type body struct {
		Parts []part          `json:"parts"`
		Raw   json.RawMessage `json:"raw"`
	}
	big := strings.Repeat("A", 2*strictCopyMax)
	for _, tc := range []struct{ name, data, want string }{
		{"ok", `{"parts": [{"url": "` + big + `", "kind": 1}], "raw": {"x": "` + big + `"}}`, ""},
		{"unknown key", `{"parts": [{"url": "` + big + `", "nope": 1}]}`, `json: unknown field "nope"`},
		{"wrong type", `{"parts": [{"url": "` + big + `", "kind": "1"}]}`, "cannot unmarshal string"},
		{"two values", `{"parts": [{"url": "` + big + `"}]} {}`, ErrTrailing.Error()},
		{"syntax", `{"parts": [{"url": "` + big + `"}]]}`, "invalid character ']'"},
	} {
		var small, large body
		errSmall := decodeStrict([]byte(tc.data), &small)
		errLarge := DecodeStrict([]byte(tc.data), &large)
		if tc.want == "" {
			if errLarge != nil || errSmall != nil || len(large.Parts) != 1 || large.Parts[0].URL != big || string(large.Raw) != string(small.Raw) {
				t.Errorf("%s: %v %v", tc.name, errSmall, errLarge)
			}
			continue
		}
		if errLarge == nil || !strings.Contains(errLarge.Error(), tc.want) || errSmall == nil || !strings.Contains(errSmall.Error(), tc.want) {
			t.Errorf("%s: %v and %v, want %q", tc.name, errSmall, errLarge, tc.want)
		}
		var syntaxSmall, syntaxLarge *json.SyntaxError
		if errors.As(errSmall, &syntaxSmall) && (!errors.As(errLarge, &syntaxLarge) || syntaxLarge.Offset != syntaxSmall.Offset) {
			t.Errorf("%s: offset %d, want %d", tc.name, syntaxLarge.Offset, syntaxSmall.Offset)
		}
	}
}

// TestSplitArray: SplitArray finds what json.Unmarshal into
// []json.RawMessage finds.
func TestSplitArray(t *testing.T) {
	for _, data := range []string{`[]`, ` [ ] `, `[1]`, `[{"a": [1, "x,]"]}, "b\"]", [2, 3], null]`, `[1,]`, `{}`, `"x"`, `[`} {
		var want []json.RawMessage
		wantErr := json.Unmarshal([]byte(data), &want)
		got, ok := SplitArray([]byte(data))
		if ok != (wantErr == nil) || len(got) != len(want) {
			t.Errorf("%s: %q %v, want %q %v", data, got, ok, want, wantErr)
			continue
		}
		for i := range got {
			if string(got[i]) != string(want[i]) {
				t.Errorf("%s: [%d] %s, want %s", data, i, got[i], want[i])
			}
		}
	}
}
