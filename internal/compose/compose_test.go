package compose_test

import (
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/runspec"
	"github.com/agentd/agentd/internal/tools"
)

// previous is testdata/previous.json: rows as an earlier release of
// agentd stored them, and the parameters of the runs it made of them.
type previous struct {
	Agents []struct {
		Name        string          `json:"name"`
		Version     int             `json:"version"`
		Description string          `json:"description"`
		Definition  json.RawMessage `json:"definition"`
	} `json:"agents"`
	Schedules []struct {
		Name string          `json:"name"`
		Run  json.RawMessage `json:"run"`
	} `json:"schedules"`
	Requests map[string]json.RawMessage `json:"requests"`
	Runs     []struct {
		Name            string            `json:"name"`
		Model           string            `json:"model"`
		Params          json.RawMessage   `json:"params"`
		ParentVariables map[string]string `json:"parent_variables"`
	} `json:"runs"`
}

// fixture is a composer over a new database holding the agents of p, with
// the server's tools of that release that its rows name.
func fixture(t *testing.T, p previous) *compose.Composer {
	t.Helper()
	store, _ := persisttest.New(t)
	for _, a := range p.Agents {
		if _, err := store.AgentCreate(context.Background(), agentd.AgentDefine{TenantID: "default", Name: a.Name,
			Description: a.Description, Definition: a.Definition, Actor: "local"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := tools.NewRegistry(tools.Calculator(), tools.Clock())
	if err != nil {
		t.Fatal(err)
	}
	return compose.New(compose.Config{Builder: runspec.New(runspec.Defaults{Model: "fake"}, reg), Agents: store, Registry: reg})
}

// TestPreviousRows: agent versions and schedule templates stored by an
// earlier release still read, and compose the runs that release made of
// them, parameter for parameter: a POST /runs naming each agent, a slot of
// each schedule, and a sub-agent's child.
func TestPreviousRows(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/previous.json")
	if err != nil {
		t.Fatal(err)
	}
	var p previous
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatal(err)
	}
	c := fixture(t, p)
	ctx := context.Background()
	templates := map[string]json.RawMessage{}
	for _, sc := range p.Schedules {
		templates[sc.Name] = sc.Run
		// Every stored template still composes, whether or not a slot ran.
		if _, err := c.Slot(ctx, agentd.Schedule{TenantID: "default", CreatedBy: "local", Name: sc.Name, Run: sc.Run}); err != nil {
			t.Errorf("schedule %s: %v", sc.Name, err)
		}
	}
	if len(p.Runs) < 5 {
		t.Fatalf("the fixture holds %d runs", len(p.Runs))
	}
	for _, want := range p.Runs {
		var got agentd.RunCreate
		var err error
		kind, name, _ := strings.Cut(want.Name, ":")
		switch {
		case kind == "request":
			var tmpl compose.Template
			if err := json.Unmarshal(p.Requests[want.Name], &tmpl); err != nil {
				t.Fatal(err)
			}
			got, err = c.Template(ctx, compose.Caller{Tenant: "default", Actor: "local"}, tmpl)
		case kind == "child":
			parent := agentd.Run{ID: agentd.NewID(), TenantID: "default", CreatedBy: "local",
				Params: agentd.RunParams{Variables: want.ParentVariables}}
			sub := agentd.SubAgent{Name: name, Version: 1}
			got, err = c.Child(ctx, parent, sub, agentd.ToolCall{ID: agentd.NewID(), IdempotencyKey: "k",
				Arguments: json.RawMessage(`{"task":"why"}`)})
			if err == nil && (len(got.Spec.Input) != 1 || got.Spec.Input[0].Content != "why" || got.IdempotencyKey != "agent:k" ||
				got.Spec.Params.Parent == nil || got.Spec.Params.Parent.RunID != parent.ID || got.Spec.Params.Parent.Depth != 1) {
				t.Errorf("child: input %+v, key %q, parent %+v", got.Spec.Input, got.IdempotencyKey, got.Spec.Params.Parent)
			}
			got.Spec.Params.Parent = nil
		default:
			got, err = c.Slot(ctx, agentd.Schedule{TenantID: "default", CreatedBy: "local", Run: templates[want.Name]})
		}
		if err != nil {
			t.Errorf("%s: %v", want.Name, err)
			continue
		}
		if got.Spec.Model != want.Model || got.TenantID != "default" || got.Actor != "local" {
			t.Errorf("%s: model %q for %s/%s", want.Name, got.Spec.Model, got.TenantID, got.Actor)
		}
		sameJSON(t, want.Name, got.Spec.Params, want.Params)
	}
}

// sameJSON fails unless v encodes to the JSON value want, keys in any
// order.
func sameJSON(t *testing.T, name string, v any, want json.RawMessage) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: params\n got %s\nwant %s", name, b, want)
	}
}
