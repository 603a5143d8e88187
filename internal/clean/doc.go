// Package clean is the one gate that values from outside agentd (request
// bodies, model output, tool results, webhook bodies) pass before they are
// stored. PostgreSQL's text and jsonb refuse some values that Go and JSON
// allow: the NUL character, invalid UTF-8, \u escapes of lone surrogates,
// and numbers beyond what numeric holds. Such a value in a commit makes the
// commit fail every time it is tried, so it must never reach one.
//
// The policy, per place (docs/design.md, "Values from outside"):
//   - what a client sends is checked with TextProblem and JSONProblem and
//     refused with a 422 that names the field; its body is checked first
//     with StringProblem, which finds (with its Place) a string that a
//     JSON decoder would silently change (invalid UTF-8, a lone surrogate
//     escape), since the decoded text no longer shows it;
//   - what a model or a tool produced is made storable with Text and JSON,
//     which change only what cannot be stored: NUL and invalid bytes become
//     U+FFFD, a lone surrogate escape becomes \ufffd, and a number outside
//     float64's range becomes a string of its digits.
//
// It imports nothing of agentd's.
package clean
