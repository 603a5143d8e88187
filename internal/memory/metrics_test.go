package memory_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/memory"
)

type usages []agentd.MemoryUsage

func (u usages) MemoryUsage(context.Context, string) ([]agentd.MemoryUsage, error) { return u, nil }

// TestCollector: the collector shows each tenant's live items and bytes.
func TestCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(memory.NewCollector(usages{{Tenant: "acme", Items: 3, Bytes: 120}, {Tenant: "globex", Items: 1, Bytes: 9}}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			got[f.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"agentd_memory_items/acme": 3, "agentd_memory_items/globex": 1,
		"agentd_memory_bytes/acme": 120, "agentd_memory_bytes/globex": 9}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
