package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/internal/compact"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// exportedMetrics returns the names of every metric an assembled instance
// registers, whether or not it has a value yet.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	env := map[string]string{"DATABASE_URL": persisttest.NewDatabase(t)}
	cfg, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	in, err := assemble(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer in.close()
	ch := make(chan *prometheus.Desc)
	go func() { in.reg.Describe(ch); close(ch) }()
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

// metricsIn returns the agentd_ metric names a PromQL text uses, without
// the _bucket, _sum and _count of histograms.
func metricsIn(expr string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`agentd_[a-z_]+`).FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			m = strings.TrimSuffix(m, suffix)
		}
		out = append(out, m)
	}
	return out
}

// TestDashboardAndAlertsUseExportedMetrics: every metric the Grafana
// dashboard and the alerting rules query is one agentd exports, and the
// rules pass promtool where it is installed.
func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t)
	if !exported["agentd_runs_total"] || !exported["agentd_sse_clients_dropped_total"] {
		t.Fatalf("the instance's registry lacks metrics it has: %v", exported)
	}
	b, err := os.ReadFile("../../deploy/grafana/agentd.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metricsIn(tg.Expr) {
				used[m] = true
				if !exported[m] {
					t.Errorf("panel %q queries %s, which agentd does not export", p.Title, m)
				}
			}
		}
	}
	for _, want := range []string{"agentd_runs_total", "agentd_step_duration_seconds", "agentd_run_duration_seconds",
		"agentd_model_time_to_first_token_seconds", "agentd_tool_attempts_total", "agentd_sse_clients",
		"agentd_event_delivery_lag_seconds", "agentd_leases_lost_total", "agentd_runs_recovered_total"} {
		if !used[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	rules, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, line := range strings.Split(string(rules), "\n") {
		if a, ok := strings.CutPrefix(strings.TrimSpace(line), "- alert: "); ok {
			alerts = append(alerts, a)
		}
	}
	slices.Sort(alerts)
	if strings.Join(alerts, " ") != "AgentdEventDeliveryLag AgentdLeaseLosses AgentdModelErrorRate AgentdRunsStuckQueued" {
		t.Fatalf("alerts: %v", alerts)
	}
	for _, m := range metricsIn(string(rules)) {
		if !exported[m] {
			t.Errorf("the alerts query %s, which agentd does not export", m)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("AGENTD_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is not installed")
		}
		t.Log("promtool is not installed: the rules' syntax is not checked")
		return
	}
	if out, err := exec.Command(promtool, "check", "rules", "../../deploy/prometheus/alerts.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestSampleModelsFilePricesTheFake: deploy/models.fake.json, which
// docs/usage.md gives to try costs and budgets with the built-in fake
// model, loads and prices fake.
func TestSampleModelsFilePricesTheFake(t *testing.T) {
	p, err := compact.LoadProfiles("../../deploy/models.fake.json")
	if err != nil {
		t.Fatal(err)
	}
	if pr := p.For("fake").Prices; pr == nil || pr.Input <= 0 || pr.Output <= 0 {
		t.Fatalf("fake's prices: %+v", pr)
	}
}
