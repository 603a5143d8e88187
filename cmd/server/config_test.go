package main

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/auth"
	engine "github.com/agentd/agentd/internal/run"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the settings (go generate ./cmd/server)")

const referencePath = "../../docs/configuration.md"

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestConfigurationReference: docs/configuration.md says what the settings'
// tags say; -update rewrites it.
func TestConfigurationReference(t *testing.T) {
	t.Parallel()
	var want bytes.Buffer
	if err := writeReference(&want); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(referencePath, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v: run go generate ./cmd/server", err)
	}
	if bytes.Equal(got, want.Bytes()) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")
	for i := range max(len(gl), len(wl)) {
		g, w := "(end)", "(end)"
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("docs/configuration.md differs from the settings at line %d (run go generate ./cmd/server):\nfile:     %s\nsettings: %s", i+1, g, w)
		}
	}
}

// TestConfigurationReferenceLists: the reference names every variable and
// every flag, renders 'quoted' words as code and keeps apostrophes.
func TestConfigurationReferenceLists(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := writeReference(&b); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, s := range configSettings() {
		if !strings.Contains(doc, "| `"+s.key+"` |") {
			t.Errorf("no row for %s", s.key)
		}
		if s.flag != "" && !strings.Contains(doc, "| `-"+s.flag+"` |") {
			t.Errorf("no flag -%s", s.flag)
		}
	}
	for _, want := range []string{"`408 body_timeout`", "a dead instance's runs", "`GOGC=300`", "## Tenant quotas"} {
		if !strings.Contains(doc, want) {
			t.Errorf("reference lacks %q", want)
		}
	}
	if strings.Contains(doc, " '") {
		t.Errorf("a quoted word was not turned into code: %q", doc[strings.Index(doc, " '"):][:40])
	}
}

// TestConfigSettings: every field of a settings group is a setting with a
// variable and a description; no variable, flag or field name is used twice;
// every min and default reads as its field's type.
func TestConfigSettings(t *testing.T) {
	t.Parallel()
	keys, flags, fields := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, g := range configGroups() {
		if g.title == "" || g.intro == "" {
			t.Errorf("group %v: no group or intro tag", g.settings[0].index[0])
		}
		for _, s := range g.settings {
			if s.key == "" || s.key == "-" || s.desc == "" {
				t.Errorf("%s: env %q, desc %q", s.field.Name, s.key, s.desc)
			}
			if keys[s.key] || fields[s.field.Name] || (s.flag != "" && flags[s.flag]) {
				t.Errorf("%s (%s, -%s) used twice", s.key, s.field.Name, s.flag)
			}
			keys[s.key], fields[s.field.Name], flags[s.flag] = true, true, s.flag != ""
			if s.field.Type == durationType && s.min != "" {
				if _, err := parseDays(s.min); err != nil {
					t.Errorf("%s: min %q: %v", s.key, s.min, err)
				}
			}
		}
	}
	// Every default is valid: nothing set, nothing wrong.
	if _, err := parseConfig(nil, envOf(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
}

// TestConfigDefaults: with nothing set, every setting has its documented
// default, and the derived fields follow.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := parseConfig(nil, envOf(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		ServerSettings: ServerSettings{Addr: "127.0.0.1:8080", MaxBodyBytes: 1 << 20, MaxInputFile: 5 << 20, MaxInputFiles: 20 << 20,
			MaxWait: time.Minute, BodyTimeout: 30 * time.Second,
			MaxConnections: 1024, LogLevel: slog.LevelInfo, ShutdownGrace: 10 * time.Second},
		DatabaseSettings: DatabaseSettings{DatabaseURL: defaultDatabaseURL, ReplicaMaxLag: 5 * time.Second, Migrate: true,
			MaxConns: engine.DefaultWorkers + 16, Committers: 1, DeltaTick: 50 * time.Millisecond, RetentionEvery: 10 * time.Minute},
		RunSettings: RunSettings{Workers: engine.DefaultWorkers, LeaseTTL: 15 * time.Second, PollInterval: 2 * time.Second,
			MaxTotalTimeout: 24 * time.Hour, MaxStepTimeout: time.Hour, MaxIdleTimeout: 10 * time.Minute,
			MaxToolTimeout: time.Hour, MaxActionTimeout: 168 * time.Hour, ScheduleTick: 250 * time.Millisecond, ScheduleFailures: 5},
		StreamSettings: StreamSettings{Heartbeat: 15 * time.Second, SSERetry: 2 * time.Second},
		ToolSettings:   ToolSettings{CallsPerStep: 64, CallsPerRun: 1000, ToolsAtOnce: 64, AgentDepth: 3, AgentTreeRuns: 100, AgentChildren: 8},
		WebhookSettings: WebhookSettings{WebhookBackoff: 5 * time.Second, WebhookHorizon: 24 * time.Hour, WebhookDisableAfter: 24 * time.Hour,
			WebhookTimeout: 10 * time.Second, WebhookWorkers: 8},
		AuthSettings: AuthSettings{Auth: authNone, KeyCacheTTL: 5 * time.Second, OIDCTenantClaim: "tenant",
			OIDCScopesClaim: "scope"},
		TracingSettings: TracingSettings{ServiceName: "agentd", BatchDelayMS: 5000},
		MemorySettings: MemorySettings{MemoryItemsPerNamespace: 10000, MemoryBytesPerItem: 65536,
			MemoryBytesPerTenant: 100 << 20, MemoryKeepVersions: 10, MemoryVersionMaxAge: 30 * 24 * time.Hour,
			MemorySweepEvery: 10 * time.Minute, MemoryExtractWorkers: 2, MemoryExtractTimeout: 2 * time.Minute,
			MemoryExtractAttempts: 5},
		DatasetSettings: DatasetSettings{DatasetMaxCases: 1000, DatasetMaxCaseBytes: 2 << 20},
		OIDC:            auth.OIDCConfig{TenantClaim: "tenant", ScopesClaim: "scope"},
		Quotas:          api.Quotas{CreateBurst: 1},
		MaxTimeouts:     [5]time.Duration{24 * time.Hour, time.Hour, 10 * time.Minute, time.Hour, 168 * time.Hour},
	}
	c.getenv = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

// TestConfigFlagWins: a flag wins over its variable, a variable over the
// default, and an empty flag or variable is unset: the default applies, or
// nothing for a setting without one.
func TestConfigFlagWins(t *testing.T) {
	t.Parallel()
	env := map[string]string{"AGENTD_WORKERS": "3", "AGENTD_LEASE_TTL": "20s", "AGENTD_HTTP_ALLOW_HOSTS": "a.example",
		"AGENTD_CORS_ORIGINS": " https://a.example , ,https://b.example", "AGENTD_MAX_ACTION_TIMEOUT": "7d",
		"AGENTD_MIGRATE": "no", "AGENTD_TRACE_CONTENT": "YES", "AGENTD_LOG_LEVEL": "debug", "AGENTD_HEARTBEAT": "",
		"OPENAI_API_KEY": "sk-test", "AGENTD_TENANT_RUNS_PER_SECOND": "2.5", "AGENTD_AUTH": "oidc",
		"AGENTD_OIDC_ISSUER": "https://id.example", "AGENTD_OIDC_AUDIENCE": "agentd", "AGENTD_TENANT_STREAMS": "7",
		"AGENTD_TENANT_MONTHLY_BUDGET": "40"}
	c, err := parseConfig([]string{"-workers", "5", "-http-allow-hosts", "", "-migrate=true", "-log-level", "warn",
		"-db-max-conns", "9", "-oidc-tenant-claim", "org", "-tenant-monthly-budget", "12.5"}, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"workers (flag)", c.Workers, 5},
		{"lease ttl (env)", c.LeaseTTL, 20 * time.Second},
		{"heartbeat (empty env: default)", c.Heartbeat, 15 * time.Second},
		{"allow hosts (empty flag)", c.HTTPAllowHosts, []string(nil)},
		{"cors origins", c.CORSOrigins, []string{"https://a.example", "https://b.example"}},
		{"action timeout in days", c.MaxActionTimeout, 7 * 24 * time.Hour},
		{"migrate (flag)", c.Migrate, true},
		{"trace content", c.TraceContent, true},
		{"log level (flag)", c.LogLevel, slog.LevelWarn},
		{"db max conns (flag)", c.MaxConns, 9},
		{"openai key", c.OpenAIKey, "sk-test"},
		{"quotas", c.Quotas, api.Quotas{CreatesPerSecond: 2.5, CreateBurst: 5, StreamsPerTenant: 7}},
		{"oidc", c.OIDC, auth.OIDCConfig{Issuer: "https://id.example", Audience: "agentd", TenantClaim: "org", ScopesClaim: "scope"}},
		{"max timeouts", c.MaxTimeouts[4], 7 * 24 * time.Hour},
		{"auth", c.Auth, authOIDC},
		{"monthly budget (flag)", c.TenantMonthlyBudget, 12.5},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s: %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if c.getenv("OTEL_SERVICE_NAME") != "" || c.getenv("OPENAI_API_KEY") != "sk-test" {
		t.Error("config does not keep the environment it was read from")
	}
}

// TestConfigEnvironmentIsGiven: the settings come from the environment run
// is given, never from the process's own.
func TestConfigEnvironmentIsGiven(t *testing.T) {
	t.Setenv("AGENTD_WORKERS", "7")
	t.Setenv("AGENTD_MIGRATE", "bogus")
	c, err := parseConfig(nil, envOf(nil), io.Discard)
	if err != nil || c.Workers != engine.DefaultWorkers {
		t.Fatalf("workers %d, err %v: read the process environment", c.Workers, err)
	}
}

// TestConfigBadValues: every bad value is an error naming where it came
// from, the variable or the flag, and the value; all are reported at once.
func TestConfigBadValues(t *testing.T) {
	t.Parallel()
	cases := []struct {
		env  map[string]string
		args []string
		want string
	}{
		{env: map[string]string{"AGENTD_WORKERS": "0"}, want: `AGENTD_WORKERS: want an integer >= 1, got "0"`},
		{env: map[string]string{"AGENTD_WORKERS": "many"}, want: `AGENTD_WORKERS: want an integer >= 1, got "many"`},
		{args: []string{"-workers", "-2"}, want: `-workers: want an integer >= 1, got "-2"`},
		{env: map[string]string{"AGENTD_DB_MAX_CONNS": "-1"}, want: `AGENTD_DB_MAX_CONNS: want an integer >= 0, got "-1"`},
		{env: map[string]string{"AGENTD_MAX_BODY_BYTES": "1000"}, want: `AGENTD_MAX_BODY_BYTES: want an integer >= 1024, got "1000"`},
		{env: map[string]string{"AGENTD_LEASE_TTL": "0s"}, want: `AGENTD_LEASE_TTL: want a positive duration such as 15s, got "0s"`},
		{args: []string{"-heartbeat", "soon"}, want: `-heartbeat: want a positive duration such as 15s, got "soon"`},
		{env: map[string]string{"AGENTD_MAX_TOTAL_TIMEOUT": "-1h"}, want: `AGENTD_MAX_TOTAL_TIMEOUT: want a positive duration`},
		{env: map[string]string{"AGENTD_RETENTION": "30s"}, want: `AGENTD_RETENTION: want a duration of at least 1m, such as 30d or 720h, got "30s"`},
		{env: map[string]string{"AGENTD_RETENTION": "0"}, want: `AGENTD_RETENTION: want a duration of at least 1m`},
		{args: []string{"-retention", "-3d"}, want: `-retention: want a duration of at least 1m, such as 30d or 720h, got "-3d"`},
		{env: map[string]string{"AGENTD_MIGRATE": "maybe"}, want: `AGENTD_MIGRATE: want true or false, got "maybe"`},
		{env: map[string]string{"AGENTD_TRACE_CONTENT": "on"}, want: `AGENTD_TRACE_CONTENT: want true or false, got "on"`},
		{env: map[string]string{"AGENTD_LOG_LEVEL": "loud"}, want: `AGENTD_LOG_LEVEL: want debug, info, warn or error, got "loud"`},
		{env: map[string]string{"AGENTD_TENANT_RUNS_PER_SECOND": "-1"}, want: `AGENTD_TENANT_RUNS_PER_SECOND: want a number >= 0, got "-1"`},
		{env: map[string]string{"AGENTD_TENANT_RUNS_PER_SECOND": "NaN"}, want: `AGENTD_TENANT_RUNS_PER_SECOND: want a number >= 0, got "NaN"`},
		{env: map[string]string{"AGENTD_TENANT_RUNS_PER_SECOND": "+Inf"}, want: `AGENTD_TENANT_RUNS_PER_SECOND: want a number >= 0, got "+Inf"`},
		{env: map[string]string{"AGENTD_TENANT_STREAMS": "1.5"}, want: `AGENTD_TENANT_STREAMS: want an integer >= 0, got "1.5"`},
		{env: map[string]string{"AGENTD_TENANT_MONTHLY_BUDGET": "-5"}, want: `AGENTD_TENANT_MONTHLY_BUDGET: want a number >= 0, got "-5"`},
		{env: map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "5s"}, want: `OTEL_BSP_SCHEDULE_DELAY: want an integer >= 1, got "5s"`},
		{args: []string{"-auth", "basic"}, want: `-auth: want keys, oidc or none, got "basic"`},
		{args: []string{"serve"}, want: `unexpected argument "serve"`},
		{args: []string{"-no-such-flag", "1"}, want: `flag provided but not defined: -no-such-flag`},
	}
	for _, c := range cases {
		_, err := parseConfig(c.args, envOf(c.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v %v: err %v, want one line with %q", c.env, c.args, err, c.want)
		}
	}
	_, err := parseConfig([]string{"-committers", "0"}, envOf(map[string]string{"AGENTD_SSE_RETRY": "x", "AGENTD_AUTH": "nope"}), io.Discard)
	if err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Fatalf("want three errors, one a line, got %v", err)
	}
}

// TestConfigHelp: -h lists every flag with its variable and its built-in
// default, never a value of the environment.
func TestConfigHelp(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	secret := "postgres://agentd:hunter2@db.internal/agentd"
	_, err := parseConfig([]string{"-h"}, envOf(map[string]string{"DATABASE_URL": secret}), &out)
	if err != flag.ErrHelp {
		t.Fatalf("-h: %v", err)
	}
	help := out.String()
	if strings.Contains(help, "hunter2") {
		t.Error("-h shows the environment's DATABASE_URL")
	}
	for _, s := range configSettings() {
		if s.flag != "" && (!strings.Contains(help, "-"+s.flag+" ") || !strings.Contains(help, "("+s.key+")")) {
			t.Errorf("-h lacks -%s (%s)", s.flag, s.key)
		}
	}
	if !strings.Contains(help, `(default "16")`) {
		t.Errorf("-h does not show the workers' default:\n%s", help)
	}
}
