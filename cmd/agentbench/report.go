package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
)

// metric is one figure of one phase in one repetition.
type metric struct {
	Phase, Name, Unit string
	Value             float64
	Target            *target
}

// target is what a figure should be. With Every, each repetition must meet
// it, not only the median: for counts of faults, where one is one too many.
type target struct {
	Op    string  `json:"op"` // ">=", "<=" or "<"
	Value float64 `json:"value"`
	Every bool    `json:"every_repetition,omitempty"`
}

func atLeast(v float64) *target { return &target{Op: ">=", Value: v} }
func atMost(v float64) *target  { return &target{Op: "<=", Value: v} }
func below(v float64) *target   { return &target{Op: "<", Value: v} }

// noneEver is the target of a count of faults.
func noneEver() *target { return &target{Op: "<=", Value: 0, Every: true} }

func (t *target) meets(v float64) bool {
	switch t.Op {
	case ">=":
		return v >= t.Value
	case "<=":
		return v <= t.Value
	case "<":
		return v < t.Value
	}
	panic("agentbench: unknown target operator " + t.Op)
}

// phrase is the target in words, with unit: "at most 1.5x", "at least 1.5x".
func (t *target) phrase(unit string) string {
	words := map[string]string{">=": "at least", "<=": "at most", "<": "below"}[t.Op]
	return words + " " + strconv.FormatFloat(t.Value, 'f', -1, 64) + unitSuffix(unit)
}

func (t *target) String() string {
	s := t.Op + " " + strconv.FormatFloat(t.Value, 'f', -1, 64)
	if t.Every {
		s += " (each)"
	}
	return s
}

// summary is a metric over the repetitions.
type summary struct {
	Phase  string    `json:"phase"`
	Name   string    `json:"name"`
	Unit   string    `json:"unit"`
	Values []float64 `json:"values"` // one per repetition, in order
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Target *target   `json:"target,omitempty"`
	Met    *bool     `json:"met,omitempty"`
}

// summarize groups the metrics of every repetition by phase and name, in
// the order they first appear, and judges each median against its target.
func summarize(ms []metric) []summary {
	var out []summary
	index := map[[2]string]int{}
	for _, m := range ms {
		k := [2]string{m.Phase, m.Name}
		i, ok := index[k]
		if !ok {
			i = len(out)
			index[k] = i
			out = append(out, summary{Phase: m.Phase, Name: m.Name, Unit: m.Unit, Target: m.Target})
		}
		out[i].Values = append(out[i].Values, m.Value)
	}
	for i := range out {
		s := &out[i]
		sorted := slices.Sorted(slices.Values(s.Values))
		n := len(sorted)
		s.Min, s.Max, s.Median = sorted[0], sorted[n-1], (sorted[(n-1)/2]+sorted[n/2])/2
		if s.Target != nil {
			met := s.Target.meets(s.Median)
			if s.Target.Every {
				met = !slices.ContainsFunc(s.Values, func(v float64) bool { return !s.Target.meets(v) })
			}
			s.Met = &met
		}
	}
	return out
}

// printTable writes one row per metric.
func printTable(w io.Writer, ss []summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tmetric\tunit\tmedian\tmin-max\ttarget\tmet")
	for _, s := range ss {
		tgt, met := "", ""
		if s.Target != nil {
			tgt, met = s.Target.String(), "no"
			if *s.Met {
				met = "yes"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s-%s\t%s\t%s\n", s.Phase, s.Name, s.Unit,
			formatValue(s.Median), formatValue(s.Min), formatValue(s.Max), tgt, met)
	}
	tw.Flush()
}

// formatValue prints about three significant digits, and whole numbers
// from 100 up.
func formatValue(v float64) string {
	prec := 0
	switch a := math.Abs(v); {
	case a == 0 || a >= 100:
	case a >= 10:
		prec = 1
	case a >= 1:
		prec = 2
	default:
		prec = 3
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// report is the JSON file of a benchmark.
type report struct {
	Date    time.Time     `json:"date"`
	Machine machine       `json:"machine"`
	Options reportOptions `json:"options"`
	Metrics []summary     `json:"metrics"`
}

type machine struct {
	CPUs              int    `json:"cpus"`
	GOOS              string `json:"goos"`
	GOARCH            string `json:"goarch"`
	Go                string `json:"go"`
	PostgreSQL        string `json:"postgresql"`
	SynchronousCommit string `json:"synchronous_commit"`
}

type reportOptions struct {
	What        []string `json:"what"`
	Reps        int      `json:"reps"`
	Duration    string   `json:"duration"`
	Quick       bool     `json:"quick"`
	Floor       float64  `json:"floor,omitempty"` // given with -floor, not measured
	URL         string   `json:"url,omitempty"`   // the server measured, when not in this process
	StreamRuns  int      `json:"stream_runs"`
	Subscribers []int    `json:"subscribers"`
}

func writeReport(path string, r report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
