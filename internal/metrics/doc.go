// Package metrics is how agentd's packages register their Prometheus
// series: one way for all of them, so that several instances of a component
// (tests start many) can share a registry, and a component built without a
// registry still has working series.
//
// It imports nothing of agentd's.
package metrics
