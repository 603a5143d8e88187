package tools

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want float64
	}{
		{"1", 1},
		{"  42  ", 42},
		{"1.5 + .5", 2},
		{"1e3 + 2E-1", 1000.2},
		{"1 + 2 * 3", 7},
		{"(1 + 2) * 3", 9},
		{"10 - 4 - 3", 3},
		{"100 / 10 / 5", 2},
		{"7 % 4", 3},
		{"-7 % 4", -3},
		{"2 ^ 3 ^ 2", 512}, // right-associative
		{"2 ** 3", 8},
		{"(2 ^ 3) ^ 2", 64},
		{"-2 ^ 2", -4}, // power binds tighter than unary minus
		{"(-2) ^ 2", 4},
		{"2 ^ -1", 0.5},
		{"--3", 3},
		{"-(1 + 2)", -3},
		{"+5 - -5", 10},
		{"2 * -3", -6},
		{"sqrt(16) + abs(-3)", 7},
		{"min(3, 1, 2) + max(4, 9)", 10},
		{"floor(2.7) + ceil(2.2) + round(2.5)", 8},
		{"2 * pi", 2 * math.Pi},
		{"e ^ 1", math.E},
		{"SQRT(4)", 2},
		{"((((1))))", 1},
	}
	for _, tt := range tests {
		got, err := Evaluate(tt.expr)
		if err != nil {
			t.Errorf("Evaluate(%q): %v", tt.expr, err)
			continue
		}
		if math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Evaluate(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

func TestEvaluateErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, want string
	}{
		{"1 / 0", "division by zero"},
		{"1 / (2 - 2)", "division by zero"},
		{"5 % 0", "modulo by zero"},
		{"", "unexpected end"},
		{"1 +", "unexpected end"},
		{"(1 + 2", "missing closing parenthesis"},
		{"1 + 2)", `unexpected ")"`},
		{"2 * * 3", `unexpected "*"`},
		{"1 2", `unexpected "2"`},
		{"foo(1)", `unknown name "foo"`},
		{"sqrt 4", "needs parentheses"},
		{"sqrt(-1)", "sqrt of a negative"},
		{"sqrt(1, 2)", "takes 1 argument"},
		{"1 $ 2", "unexpected character '$'"},
		{"1..2", "invalid number"},
		{"10 ^ 400", "not a finite number"},
		{"3 × 4", "unexpected character"},
		{strings.Repeat("(", 200) + "1" + strings.Repeat(")", 200), "nested too deeply"},
	}
	for _, tt := range tests {
		_, err := Evaluate(tt.expr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Evaluate(%q) error = %v, want it to contain %q", tt.expr, err, tt.want)
		}
	}
}

func TestCalculatorInvoke(t *testing.T) {
	t.Parallel()
	c := Calculator()
	got, err := c.Invoke(context.Background(), Call{Arguments: json.RawMessage(`{"expression":"(2+3)*4"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"result":20}` {
		t.Errorf("result = %s", got)
	}
	_, err = c.Invoke(context.Background(), Call{Arguments: json.RawMessage(`{"expression":"1/0"}`)})
	var te *Error
	if !errors.As(err, &te) || te.Kind != KindFinal || !strings.Contains(te.Message, "division by zero") {
		t.Errorf("1/0: err = %v, want KindFinal division by zero", err)
	}
}

func TestClock(t *testing.T) {
	t.Parallel()
	c := Clock()
	for _, tz := range []string{"", "UTC", "Europe/Paris", "America/New_York"} {
		args, _ := json.Marshal(map[string]string{"timezone": tz})
		raw, err := c.Invoke(context.Background(), Call{Arguments: args})
		if err != nil {
			t.Fatalf("%q: %v", tz, err)
		}
		var got struct {
			Now      string `json:"now"`
			Unix     int64  `json:"unix"`
			Timezone string `json:"timezone"`
		}
		if err := json.Unmarshal(raw, &got); err != nil || got.Now == "" || got.Unix == 0 {
			t.Fatalf("%q: result %s (%v)", tz, raw, err)
		}
		want := tz
		if want == "" {
			want = "UTC"
		}
		if got.Timezone != want {
			t.Errorf("timezone = %q, want %q", got.Timezone, want)
		}
	}
	_, err := c.Invoke(context.Background(), Call{Arguments: json.RawMessage(`{"timezone":"Mars/Olympus"}`)})
	if KindOf(err) != KindFinal {
		t.Errorf("unknown zone: err = %v, want KindFinal", err)
	}
	if _, err := c.Invoke(context.Background(), Call{}); err != nil {
		t.Errorf("no arguments: %v", err)
	}
}
