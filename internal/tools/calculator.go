package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/agentd/agentd"
)

// Calculator returns the read_only tool "calculator", which evaluates an
// arithmetic expression: numbers (1, 2.5, .5, 1e3), + - * / %, ^ or ** for
// power (right-associative, binding tighter than unary minus: -2^2 = -4),
// parentheses, the constants pi and e, and the functions sqrt, abs, min, max,
// floor, ceil, round, exp, ln, log10, sin, cos, tan. The result is
// {"result": number}. A parse error, division by zero, or a result that is
// not a finite number is a KindFinal error.
func Calculator() Tool { return calculator{} }

type calculator struct{}

var calculatorSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "expression": {
      "type": "string",
      "minLength": 1,
      "maxLength": 1000,
      "description": "Arithmetic expression, e.g. (2 + 3) * 4 ^ 2 / sqrt(16). Operators: + - * / % ^; functions: sqrt abs min max floor ceil round exp ln log10 sin cos tan; constants: pi e."
    }
  },
  "required": ["expression"],
  "additionalProperties": false
}`)

func (calculator) Spec() Spec {
	return Spec{
		Name:        "calculator",
		Description: "Evaluate an arithmetic expression exactly as written and return the number.",
		Parameters:  calculatorSchema,
		Effect:      agentd.EffectReadOnly,
	}
}

func (calculator) Invoke(ctx context.Context, call Call) (json.RawMessage, error) {
	var args struct {
		Expression string `json:"expression"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, &Error{Kind: KindFinal, Message: "arguments must be an object with a string \"expression\"", Err: err}
	}
	v, err := Evaluate(args.Expression)
	if err != nil {
		return nil, &Error{Kind: KindFinal, Message: err.Error()}
	}
	return json.Marshal(struct {
		Result float64 `json:"result"`
	}{v})
}

// Evaluate computes an arithmetic expression in the calculator's grammar.
func Evaluate(expr string) (float64, error) {
	p := &parser{src: expr}
	p.next()
	v, err := p.expr(0)
	if err != nil {
		return 0, err
	}
	if p.tok.kind != tokEOF {
		return 0, p.unexpected()
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("result is not a finite number")
	}
	return v, nil
}

type tokKind int

const (
	tokEOF tokKind = iota
	tokNum
	tokIdent
	tokOp // one of + - * / % ^ ( ) , (** is read as ^)
)

type token struct {
	kind tokKind
	text string
	num  float64
	pos  int // 1-based column, for messages
}

type parser struct {
	src string
	off int
	tok token
	err error // first lexing error
}

const maxDepth = 100

func (p *parser) next() {
	for p.off < len(p.src) && strings.ContainsRune(" \t\r\n", rune(p.src[p.off])) {
		p.off++
	}
	start := p.off
	if p.off >= len(p.src) {
		p.tok = token{kind: tokEOF, pos: start + 1}
		return
	}
	c := p.src[p.off]
	switch {
	case c >= '0' && c <= '9' || c == '.':
		for p.off < len(p.src) && (isDigit(p.src[p.off]) || p.src[p.off] == '.') {
			p.off++
		}
		if p.off < len(p.src) && (p.src[p.off] == 'e' || p.src[p.off] == 'E') {
			// An exponent only if digits follow, so that "2e" stays an error
			// and "2*e" still reads the constant.
			j := p.off + 1
			if j < len(p.src) && (p.src[j] == '+' || p.src[j] == '-') {
				j++
			}
			if j < len(p.src) && isDigit(p.src[j]) {
				for j < len(p.src) && isDigit(p.src[j]) {
					j++
				}
				p.off = j
			}
		}
		text := p.src[start:p.off]
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			p.tok = token{kind: tokOp, text: text, pos: start + 1}
			if p.err == nil {
				p.err = fmt.Errorf("invalid number %q at position %d", text, start+1)
			}
			return
		}
		p.tok = token{kind: tokNum, text: text, num: v, pos: start + 1}
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		for p.off < len(p.src) && (p.src[p.off] == '_' || isDigit(p.src[p.off]) || p.src[p.off]|0x20 >= 'a' && p.src[p.off]|0x20 <= 'z') {
			p.off++
		}
		p.tok = token{kind: tokIdent, text: p.src[start:p.off], pos: start + 1}
	case c == '*' && p.off+1 < len(p.src) && p.src[p.off+1] == '*':
		p.off += 2
		p.tok = token{kind: tokOp, text: "^", pos: start + 1}
	case strings.IndexByte("+-*/%^(),", c) >= 0:
		p.off++
		p.tok = token{kind: tokOp, text: string(c), pos: start + 1}
	case c >= 0x80:
		p.tok = token{kind: tokOp, text: "?", pos: start + 1}
		if p.err == nil {
			p.err = fmt.Errorf("unexpected character at position %d (only ASCII arithmetic is understood)", start+1)
		}
	default:
		p.off++
		p.tok = token{kind: tokOp, text: string(c), pos: start + 1}
		if p.err == nil {
			p.err = fmt.Errorf("unexpected character %q at position %d", c, start+1)
		}
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) is(op string) bool { return p.tok.kind == tokOp && p.tok.text == op }

func (p *parser) unexpected() error {
	if p.err != nil {
		return p.err
	}
	if p.tok.kind == tokEOF {
		return fmt.Errorf("unexpected end of expression")
	}
	return fmt.Errorf("unexpected %q at position %d", p.tok.text, p.tok.pos)
}

// expr := term (('+' | '-') term)*
func (p *parser) expr(depth int) (float64, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("expression nested too deeply")
	}
	v, err := p.term(depth)
	if err != nil {
		return 0, err
	}
	for p.is("+") || p.is("-") {
		op := p.tok.text
		p.next()
		w, err := p.term(depth)
		if err != nil {
			return 0, err
		}
		if op == "+" {
			v += w
		} else {
			v -= w
		}
	}
	return v, nil
}

// term := unary (('*' | '/' | '%') unary)*
func (p *parser) term(depth int) (float64, error) {
	v, err := p.unary(depth)
	if err != nil {
		return 0, err
	}
	for p.is("*") || p.is("/") || p.is("%") {
		op, pos := p.tok.text, p.tok.pos
		p.next()
		w, err := p.unary(depth)
		if err != nil {
			return 0, err
		}
		switch op {
		case "*":
			v *= w
		case "/":
			if w == 0 {
				return 0, fmt.Errorf("division by zero at position %d", pos)
			}
			v /= w
		case "%":
			if w == 0 {
				return 0, fmt.Errorf("modulo by zero at position %d", pos)
			}
			v = math.Mod(v, w)
		}
	}
	return v, nil
}

// unary := ('-' | '+') unary | power
func (p *parser) unary(depth int) (float64, error) {
	if depth > maxDepth {
		return 0, fmt.Errorf("expression nested too deeply")
	}
	if p.is("-") || p.is("+") {
		neg := p.is("-")
		p.next()
		v, err := p.unary(depth + 1)
		if neg {
			v = -v
		}
		return v, err
	}
	return p.power(depth)
}

// power := primary ('^' unary)?   (right-associative through unary)
func (p *parser) power(depth int) (float64, error) {
	base, err := p.primary(depth)
	if err != nil {
		return 0, err
	}
	if !p.is("^") {
		return base, nil
	}
	p.next()
	exp, err := p.unary(depth + 1)
	if err != nil {
		return 0, err
	}
	return math.Pow(base, exp), nil
}

// primary := number | constant | function '(' expr (',' expr)* ')' | '(' expr ')'
func (p *parser) primary(depth int) (float64, error) {
	if p.err != nil {
		return 0, p.err
	}
	switch {
	case p.tok.kind == tokNum:
		v := p.tok.num
		p.next()
		return v, nil
	case p.is("("):
		p.next()
		v, err := p.expr(depth + 1)
		if err != nil {
			return 0, err
		}
		if !p.is(")") {
			if p.err == nil && p.tok.kind == tokEOF {
				return 0, fmt.Errorf("missing closing parenthesis")
			}
			return 0, p.unexpected()
		}
		p.next()
		return v, nil
	case p.tok.kind == tokIdent:
		return p.ident(depth)
	}
	return 0, p.unexpected()
}

var constants = map[string]float64{"pi": math.Pi, "e": math.E}

type function struct {
	minArgs, maxArgs int // maxArgs < 0: any number
	f                func(args []float64) (float64, error)
}

func unaryFunc(f func(float64) float64) function {
	return function{1, 1, func(a []float64) (float64, error) { return f(a[0]), nil }}
}

var functions = map[string]function{
	"sqrt": {1, 1, func(a []float64) (float64, error) {
		if a[0] < 0 {
			return 0, fmt.Errorf("sqrt of a negative number (%g)", a[0])
		}
		return math.Sqrt(a[0]), nil
	}},
	"ln": {1, 1, func(a []float64) (float64, error) {
		if a[0] <= 0 {
			return 0, fmt.Errorf("ln of a number that is not positive (%g)", a[0])
		}
		return math.Log(a[0]), nil
	}},
	"log10": {1, 1, func(a []float64) (float64, error) {
		if a[0] <= 0 {
			return 0, fmt.Errorf("log10 of a number that is not positive (%g)", a[0])
		}
		return math.Log10(a[0]), nil
	}},
	"abs":   unaryFunc(math.Abs),
	"floor": unaryFunc(math.Floor),
	"ceil":  unaryFunc(math.Ceil),
	"round": unaryFunc(math.Round),
	"exp":   unaryFunc(math.Exp),
	"sin":   unaryFunc(math.Sin),
	"cos":   unaryFunc(math.Cos),
	"tan":   unaryFunc(math.Tan),
	"min": {1, -1, func(a []float64) (float64, error) {
		m := a[0]
		for _, x := range a[1:] {
			m = math.Min(m, x)
		}
		return m, nil
	}},
	"max": {1, -1, func(a []float64) (float64, error) {
		m := a[0]
		for _, x := range a[1:] {
			m = math.Max(m, x)
		}
		return m, nil
	}},
}

func (p *parser) ident(depth int) (float64, error) {
	name, pos := strings.ToLower(p.tok.text), p.tok.pos
	p.next()
	fn, isFunc := functions[name]
	if !isFunc {
		if v, ok := constants[name]; ok {
			return v, nil
		}
		return 0, fmt.Errorf("unknown name %q at position %d", name, pos)
	}
	if !p.is("(") {
		return 0, fmt.Errorf("function %s at position %d needs parentheses, e.g. %s(4)", name, pos, name)
	}
	p.next()
	var args []float64
	for {
		v, err := p.expr(depth + 1)
		if err != nil {
			return 0, err
		}
		args = append(args, v)
		if p.is(",") {
			p.next()
			continue
		}
		if p.is(")") {
			p.next()
			break
		}
		if p.err == nil && p.tok.kind == tokEOF {
			return 0, fmt.Errorf("missing closing parenthesis for %s", name)
		}
		return 0, p.unexpected()
	}
	if len(args) < fn.minArgs || fn.maxArgs >= 0 && len(args) > fn.maxArgs {
		return 0, fmt.Errorf("function %s takes %s, got %d", name, arity(fn), len(args))
	}
	return fn.f(args)
}

func arity(fn function) string {
	switch {
	case fn.maxArgs < 0:
		return fmt.Sprintf("at least %d argument(s)", fn.minArgs)
	case fn.minArgs == 1 && fn.maxArgs == 1:
		return "1 argument"
	}
	return fmt.Sprintf("%d to %d arguments", fn.minArgs, fn.maxArgs)
}
