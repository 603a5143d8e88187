package run

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/metrics"
	"github.com/agentd/agentd/internal/tools"
)

// Metrics are the engine's Prometheus series.
type Metrics struct {
	RunsEnded       *prometheus.CounterVec
	RunDuration     prometheus.Histogram
	StepDuration    prometheus.Histogram
	TimeToFirstTok  prometheus.Histogram
	ModelRequests   *prometheus.CounterVec
	ToolAttempts    *prometheus.CounterVec
	Tokens          *prometheus.CounterVec
	EventsAppended  prometheus.Counter
	RunsRecovered   prometheus.Counter
	LeasesLost      prometheus.Counter
	RunsActive      prometheus.Gauge
	ClaimsAttempted *prometheus.CounterVec
	ModelFallbacks  *prometheus.CounterVec
	ModelTokens     *prometheus.CounterVec
	ModelCost       *prometheus.CounterVec
}

// NewMetrics creates the engine's metrics and registers them with reg (when
// reg is not nil; series an earlier engine registered there are shared).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	m := &Metrics{
		RunsEnded: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_runs_total", Help: "Runs that left the executor, by status and terminal reason.",
		}, []string{"status", "reason"})),
		RunDuration: metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_run_duration_seconds", Help: "Time from a run's creation to its end.", Buckets: buckets,
		})),
		StepDuration: metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_step_duration_seconds", Help: "Time of one step: model call and tools.", Buckets: buckets,
		})),
		TimeToFirstTok: metrics.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentd_model_time_to_first_token_seconds", Help: "Time from sending a model request to its first text delta.", Buckets: buckets,
		})),
		ModelRequests: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_model_requests_total", Help: "Model requests by outcome (ok or the error kind).",
		}, []string{"outcome"})),
		ToolAttempts: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_tool_attempts_total", Help: "Tool attempts by tool and outcome.",
		}, []string{"tool", "outcome"})),
		Tokens: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_tokens_total", Help: "Model tokens by kind (input, output, cached_input, reasoning).",
		}, []string{"kind"})),
		EventsAppended: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_events_appended_total", Help: "Run events committed by this instance's executors.",
		})),
		RunsRecovered: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_runs_recovered_total", Help: "Runs taken over from a worker whose lease expired.",
		})),
		LeasesLost: metrics.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentd_leases_lost_total", Help: "Runs this instance stopped executing because another worker took them.",
		})),
		RunsActive: metrics.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "agentd_runs_active", Help: "Runs executing on this instance now.",
		})),
		ClaimsAttempted: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_claims_total", Help: "Claim attempts by result: searches for a claimable run (claimed, empty, conflict, error), runs claimed as they were created (at_creation), runs of this instance's queue claimed (queued), claimed in the transaction of the stop of the run before them (handed), or found claimed elsewhere, cancelled or not claimable yet (queued_gone).",
		}, []string{"result"})),
		ModelFallbacks: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_model_fallbacks_total", Help: "Steps whose model kept failing and moved to the next model of their run's chain, by the models (names the models file or the built-in profiles know; other for the rest).",
		}, []string{"from", "to"})),
		ModelTokens: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_model_tokens_total", Help: "Model tokens by model (as agentd_model_fallbacks_total names them) and kind (input, cached_input, cache_write, output, reasoning), as the ledger counts them.",
		}, []string{"model", "kind"})),
		ModelCost: metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentd_model_cost_total", Help: "What model calls cost at the models file's prices, by model, as the ledger counts it.",
		}, []string{"model"})),
	}
	return m
}

// attemptOutcome is how a tool attempt ended, as agentd_tool_attempts_total
// labels it: the attempt's status, cancelled (cut by its run's end, and
// attempted again), or what a reconciler found out.
type attemptOutcome string

// Attempt outcomes.
const (
	attemptSucceeded = attemptOutcome(agentd.AttemptSucceeded)
	attemptUnknown   = attemptOutcome(agentd.AttemptUnknown)
	attemptCancelled = attemptOutcome("cancelled")
)

// attemptEnded is the outcome of an attempt that ended with status (failed
// or timed out).
func attemptEnded(status agentd.AttemptStatus) attemptOutcome { return attemptOutcome(status) }

// reconciled is the outcome of a call whose reconciler said o.
func reconciled(o tools.Outcome) attemptOutcome { return attemptOutcome("reconciled_" + string(o)) }

// attempt counts an attempt of tool that ended with outcome o.
func (m *Metrics) attempt(tool string, o attemptOutcome) {
	m.ToolAttempts.WithLabelValues(tool, string(o)).Inc()
}

// claimResult is how a claim attempt ended, as agentd_claims_total labels
// it.
type claimResult string

// Claim results: of a search for a claimable run, of a run claimed as it
// was created, of a run of this instance's queue claimed by its id, and of
// one claimed so in the transaction of the stop of the run before it.
const (
	claimClaimed    claimResult = "claimed"
	claimEmpty      claimResult = "empty"
	claimConflict   claimResult = "conflict"
	claimError      claimResult = "error"
	claimAtCreation claimResult = "at_creation"
	claimQueued     claimResult = "queued"
	claimQueuedGone claimResult = "queued_gone" // claimed elsewhere, cancelled, or not claimable yet
	claimHanded     claimResult = "handed"      // by the stop of the run before it
)

// claim counts a claim attempt that ended with r.
func (m *Metrics) claim(r claimResult) { m.ClaimsAttempted.WithLabelValues(string(r)).Inc() }

// metricModel is the model label of a series for model: its name when the
// models file or the built-in profiles know it, fake for the built-in
// fake's names, other for any other (a client may name any model: the
// label's values stay as few as the operator's models).
func (x *execution) metricModel(model string) string {
	switch {
	case x.d.profiles.Known(model):
		return model
	case model == "fake" || strings.HasPrefix(model, "fake-"):
		return "fake"
	}
	return "other"
}
