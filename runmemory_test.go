package agentd_test

import (
	"testing"
	"time"

	"github.com/agentd/agentd"
)

// TestExtractsMemory: a completed run is extracted from when it asks for
// it, keeps its memory on and is stored; never a fork, nor a run of a
// fork's conversation or tree (under its overlay).
func TestExtractsMemory(t *testing.T) {
	t.Parallel()
	now := time.Now()
	mem := func(f func(*agentd.RunMemory)) agentd.RunParams {
		m := &agentd.RunMemory{Extract: &agentd.RunMemoryExtract{Namespace: []string{"users", "ann"}}}
		if f != nil {
			f(m)
		}
		return agentd.RunParams{Memory: m}
	}
	fork := mem(nil)
	fork.ForkedFrom = &agentd.ForkRef{RunID: agentd.NewID(), Step: 1}
	unstored := mem(nil)
	unstored.Unstored = true
	for name, c := range map[string]struct {
		p    agentd.RunParams
		want bool
	}{
		"asks":            {mem(nil), true},
		"no memory":       {agentd.RunParams{}, false},
		"off":             {mem(func(m *agentd.RunMemory) { m.Off = true }), false},
		"no extract":      {mem(func(m *agentd.RunMemory) { m.Extract = nil }), false},
		"unstored":        {unstored, false},
		"a fork":          {fork, false},
		"under a overlay": {mem(func(m *agentd.RunMemory) { m.Overlay, m.Base = agentd.NewID(), &now }), false},
	} {
		if got := c.p.ExtractsMemory(); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
