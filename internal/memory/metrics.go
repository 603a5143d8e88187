package memory

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
)

// UsageReader reads the tenants' memory counters.
type UsageReader interface {
	MemoryUsage(ctx context.Context, tenant string) ([]agentd.MemoryUsage, error)
}

// Collector is the Prometheus collector of memory's size per tenant:
// agentd_memory_items (live items) and agentd_memory_bytes (the bytes of
// every version kept), read from the counters at each scrape.
type Collector struct {
	usage UsageReader
	items *prometheus.Desc
	bytes *prometheus.Desc
}

// NewCollector returns the collector over r's counters.
func NewCollector(r UsageReader) *Collector {
	return &Collector{usage: r,
		items: prometheus.NewDesc("agentd_memory_items", "Live memory items of a tenant.", []string{"tenant"}, nil),
		bytes: prometheus.NewDesc("agentd_memory_bytes", "Bytes of every memory version a tenant keeps (keys, values, data).",
			[]string{"tenant"}, nil)}
}

// Describe sends the collector's descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.items
	ch <- c.bytes
}

// Collect reads the counters (within 5 s; a scrape that cannot read them
// has no memory series).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	us, err := c.usage.MemoryUsage(ctx, "")
	if err != nil {
		return
	}
	for _, u := range us {
		ch <- prometheus.MustNewConstMetric(c.items, prometheus.GaugeValue, float64(u.Items), u.Tenant)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(u.Bytes), u.Tenant)
	}
}
