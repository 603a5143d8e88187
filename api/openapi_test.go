package api_test

import (
	"bufio"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/api/spectest"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/run"
)

// specOperations reads "METHOD /path" of every operation under the top-level
// paths: key of openapi.yaml. It is a line parser for the file as written
// (two-space indents, paths at indent 2, methods at indent 4), not a YAML
// parser; specShape checks that the file keeps that form.
func specOperations(t *testing.T, file string) []string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	var ops []string
	var inPaths bool
	var path string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case indent == 0:
			inPaths = trimmed == "paths:"
		case !inPaths:
		case indent == 2:
			if !strings.HasPrefix(trimmed, "/") || !strings.HasSuffix(trimmed, ":") {
				t.Fatalf("openapi.yaml: unexpected key under paths: %q", line)
			}
			path = strings.TrimSuffix(trimmed, ":")
		case indent == 4:
			key := strings.TrimSuffix(trimmed, ":")
			if slices.Contains(methods, key) {
				ops = append(ops, strings.ToUpper(key)+" "+path)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return ops
}

// TestOpenAPICoversRoutes checks that openapi.yaml and the router agree:
// every route is described and every described operation is routed.
func TestOpenAPICoversRoutes(t *testing.T) {
	t.Parallel()
	spec := specOperations(t, "openapi.yaml")
	if len(spec) < 10 {
		t.Fatalf("found only %d operations in openapi.yaml: %v", len(spec), spec)
	}
	h := api.New(api.Config{
		Store:      &persist.Store{}, // never called: the router is only walked
		Runs:       &run.Service{},
		Registerer: prometheus.NewRegistry(),
	})
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("New returned %T, not a chi router", h)
	}
	var routed []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed = append(routed, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range routed {
		if !slices.Contains(spec, op) {
			t.Errorf("route %s is not in openapi.yaml", op)
		}
	}
	for _, op := range spec {
		if !slices.Contains(routed, op) {
			t.Errorf("openapi.yaml describes %s, which is not routed", op)
		}
	}
	for _, code := range []string{api.CodeInvalidJSON, api.CodeInvalidField, api.CodeInvalidValue, api.CodeOriginNotAllowed, api.CodeBodyTooLarge, api.CodeBodyTimeout,
		api.CodeUnsupportedMediaType, api.CodeNotFound, api.CodeRunNotFound, api.CodeConversationNotFound,
		api.CodeUnknownTool, api.CodeConversationBusy, api.CodeIdempotencyKeyReused, api.CodeRunFinished,
		api.CodeRunCompleted, api.CodeMethodNotAllowed, api.CodeStreamingUnavailable, api.CodeNotReady, api.CodeInternal,
		api.CodeDatabaseUnavailable, api.CodeDatasetNotFound, api.CodeDatasetExists, api.CodeCaseNotFound, api.CodeCaseExists,
		api.CodeDatasetLimit} {
		if !specHas(t, "            - "+code) {
			t.Errorf("openapi.yaml: code %s is not in the Problem schema's enum", code)
		}
	}
}

func specHas(t *testing.T, line string) bool {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(strings.Split(string(b), "\n"), line)
}

// TestVocabularyMatchesTheSpec: the lists of agentd's vocabulary are the
// enums of openapi.yaml, value for value, and the terminal event types are
// the ends of the stopped run statuses.
func TestVocabularyMatchesTheSpec(t *testing.T) {
	t.Parallel()
	same := func(name string, got, want []string) {
		t.Helper()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the code lists %v, openapi.yaml %v", name, got, want)
		}
	}
	same("event types", strs(agentd.EventTypes()), spectest.Enum(t, "EventType"))
	same("event types with a data schema", strs(agentd.EventTypes()), spectest.EventTypes())
	same("run statuses", strs(agentd.RunStatuses()), spectest.Enum(t, "RunStatus"))
	same("terminal reasons", strs(agentd.Reasons()), spectest.Enum(t, "Run", "properties", "terminal_reason"))
	same("if_busy", strs(agentd.IfBusyPolicies()), spectest.Enum(t, "CreateRunRequest", "properties", "if_busy"))
	same("on_disconnect", strs(agentd.OnDisconnectPolicies()), spectest.Enum(t, "CreateRunRequest", "properties", "on_disconnect"))
	same("tool error kinds", strs(agentd.ToolErrorKinds()), spectest.Enum(t, "ToolError", "properties", "kind"))
	same("run error kinds", strs(agentd.RunErrorKinds()), spectest.Enum(t, "RunFailedData", "properties", "error", "properties", "kind"))
	same("on_quota", strs(agentd.OnQuotaPolicies()), spectest.Enum(t, "CreateRunRequest", "properties", "on_quota"))
	same("effects", strs(agentd.Effects()), spectest.Enum(t, "Tool", "properties", "effect"))
	same("memory sources", strs(agentd.MemorySources()), spectest.Enum(t, "MemoryItem", "properties", "source"))
	same("memory extraction statuses", strs(agentd.MemoryExtractionStatuses()),
		spectest.Enum(t, "MemoryExtraction", "properties", "status"))
	same("memory and dataset limits", append(strs(agentd.MemoryLimitNames()), strs(agentd.DatasetLimitNames())...),
		spectest.Enum(t, "Problem", "properties", "limit"))
	same("check types", strs(agentd.CheckTypes()), spectest.Enum(t, "CaseCheck", "properties", "type"))
	same("checked statuses", strs(agentd.CheckedStatuses()), spectest.Enum(t, "CaseCheck", "properties", "status"))
	same("case kinds", strs(agentd.CaseKinds()), spectest.Enum(t, "DatasetCase", "properties", "kind"))
	same("dataset changes", strs(agentd.DatasetChanges()), spectest.Enum(t, "Dataset", "properties", "change"))
	var terminal, ends []string
	for _, typ := range agentd.EventTypes() {
		if typ.Terminal() {
			terminal = append(terminal, string(typ))
		}
	}
	for _, s := range agentd.RunStatuses() {
		if s.Stopped() {
			ends = append(ends, string(agentd.RunEndEvent(0, s, "", nil, "").Type()))
		}
	}
	same("terminal event types", terminal, ends)
}

func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
