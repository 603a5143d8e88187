package persist_test

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestSchemaAllowsTheVocabulary: every CHECK constraint of the schema, on
// every table, allows every value the code has for its column, so that no
// value of the vocabulary can make a commit fail; and every CHECK
// constraint is listed here, so that a new table's cannot be left out.
// A constraint may allow values the code no longer writes (rows of older
// versions), but only those listed as such.
func TestSchemaAllowsTheVocabulary(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	vocab := map[string][]string{
		"runs_status_check":               strs(agentd.RunStatuses()),
		"runs_terminal_reason_check":      strs(agentd.Reasons()),
		"messages_role_check":             strs(agentd.Roles()),
		"messages_status_check":           strs(agentd.MessageStatuses()),
		"steps_status_check":              strs(agentd.StepStatuses()),
		"tool_calls_effect_check":         strs(agentd.Effects()),
		"tool_calls_status_check":         strs(agentd.CallStatuses()),
		"tool_attempts_status_check":      strs(agentd.AttemptStatuses()),
		"outbox_event_type_check":         strs(agentd.OutboxEventTypes()),
		"tenant_tools_kind_check":         agentd.ToolKinds(),
		"webhook_deliveries_status_check": strs(agentd.DeliveryStatuses()),
		"schedules_overlap_check":         strs(agentd.ScheduleOverlaps()),
		"schedules_catch_up_check":        strs(agentd.ScheduleCatchUps()),
		"model_calls_kind_check":          strs(agentd.ModelCallKinds()),
		"run_inputs_source_check":         strs(agentd.InputSources()),
		"run_inputs_status_check":         strs(agentd.InputStatuses()),
		"memory_versions_source_check":    strs(agentd.MemorySources()),
		"memory_items_source_check":       strs(agentd.MemorySources()),
		"memory_extractions_status_check": strs(agentd.MemoryExtractionStatuses()),
		"dataset_versions_change_check":   strs(agentd.DatasetChanges()),
		"dataset_cases_kind_check":        strs(agentd.CaseKinds()),
		"evals_status_check":              strs(agentd.EvalStatuses()),
	}
	// Allowed by the schema since its first version, never written.
	unused := map[string][]string{"messages_status_check": {"partial", "failed"}}
	rows, err := conn.Query(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE contype = 'c' AND connamespace = 'public'::regnamespace ORDER BY conname`)
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]string{}
	var name, def string
	if _, err := pgx.ForEachRow(rows, []any{&name, &def}, func() error { defs[name] = def; return nil }); err != nil {
		t.Fatal(err)
	}
	quoted := regexp.MustCompile(`'([^']*)'`)
	for name, def := range defs {
		values, ok := vocab[name]
		if !ok {
			t.Errorf("CHECK constraint %s (%s) is held to no vocabulary: add it to this test", name, def)
			continue
		}
		var allowed []string
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			allowed = append(allowed, m[1])
		}
		for _, v := range values {
			if !slices.Contains(allowed, v) {
				t.Errorf("%s does not allow %q: %s", name, v, def)
			}
		}
		for _, a := range allowed {
			if !slices.Contains(values, a) && !slices.Contains(unused[name], a) {
				t.Errorf("%s allows %q, which the code's vocabulary does not have: %s", name, a, def)
			}
		}
	}
	for name := range vocab {
		if _, ok := defs[name]; !ok {
			t.Errorf("the schema has no CHECK constraint %s", name)
		}
	}
}

func strs[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
