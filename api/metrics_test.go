package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentd/agentd/api"
)

// TestMetricLabelsAreBounded: made-up methods and paths do not create
// series: a method outside the standard ones is "other", a path no route
// matches is "unmatched".
func TestMetricLabelsAreBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	b := setup(t, func(c *api.Config) {
		c.Registerer = reg
		c.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	})
	series := func() int {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fams {
			if strings.HasPrefix(f.GetName(), "agentd_http_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	junk := func(round int) {
		for i := range 20 {
			method := fmt.Sprintf("X%d%s", round*100+i, strings.Repeat("Q", 500))
			b.do(method, "/runs", "")
			b.do("GET", fmt.Sprintf("/nope/%d/%s", round*100+i, strings.Repeat("p", 300)), "")
			b.do(method, fmt.Sprintf("/also/%d", i), "")
		}
	}
	junk(0)
	before := series()
	junk(1)
	junk(2)
	if after := series(); after != before {
		t.Fatalf("junk methods and paths made %d HTTP series from %d", after, before)
	}
	fams, _ := reg.Gather()
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if len(l.GetValue()) > 64 {
					t.Fatalf("%s has label %s of %d bytes", f.GetName(), l.GetName(), len(l.GetValue()))
				}
			}
		}
	}
	if r := b.do(http.MethodGet, "/metrics", ""); r.status != http.StatusOK || !strings.Contains(string(r.body), `method="other"`) {
		t.Fatalf("metrics: %d, no method=\"other\" series", r.status)
	}
}
