package fakellm

import "time"

// Script is what the directives of a text ask for, as the package doc's
// Directives say, read by ParseScript for a fake of another wire format
// (the fake Anthropic endpoint) that answers by the same directives.
type Script struct {
	// Groups are the /call groups, in order: step k answers with Groups[k].
	Groups [][]Call
	// Faults are the /fault lines, in order.
	Faults []Fault
	// StreamN and StreamGap are /stream's N and MS (0 and 0 without it).
	StreamN   int
	StreamGap time.Duration
	// Finish and FinishN are /finish's REASON ("" without it) and N (0:
	// every final answer).
	Finish  string
	FinishN int
	// Sampling, System and Media are set by /sampling, /system and /media.
	Sampling, System, Media bool

	s script
}

// Call is one scripted tool call: its function's name and its arguments,
// as written.
type Call struct {
	Name string
	Args string
}

// Fault is one /fault line: its Kind, and the Step it applies at (-1: any).
type Fault struct {
	Kind string
	Step int
}

// ParseScript reads the directives of text, as the fake reads those of a
// request's last user message. A line that starts with "/" but is no
// directive of this package is ignored, so a caller may add directives of
// its own, read from the same text; a /fault of a kind this package does
// not know is an error, so such a line is for the caller to take out
// first.
func ParseScript(text string) (Script, error) {
	s, err := parseScript(text)
	if err != nil {
		return Script{}, err
	}
	out := Script{StreamN: s.streamN, StreamGap: s.streamGap, Finish: s.finish, FinishN: s.finishN,
		Sampling: s.sampling, System: s.system, Media: s.media, s: s}
	for _, g := range s.groups {
		group := make([]Call, len(g))
		for i, c := range g {
			group[i] = Call{Name: c.name, Args: c.args}
		}
		out.Groups = append(out.Groups, group)
	}
	for _, f := range s.faults {
		out.Faults = append(out.Faults, Fault{Kind: f.kind, Step: f.step})
	}
	return out, nil
}

// FaultAt returns the kind of the first fault scripted for step, or "".
func (s Script) FaultAt(step int) string { return s.s.faultAt(step) }

// FinalPieces returns the final answer as the content chunks to send: the
// /say text ("ok" without it) split as /stream says, or /stream's words.
func (s Script) FinalPieces() []string { return s.s.finalPieces() }

// Empty reports whether the text had no directive at all.
func (s Script) Empty() bool { return s.s.empty() }
