package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestRunAudit: the SDK reads a run's audit export line by line, from its
// creation to its end line; a missing run is the server's 404.
func TestRunAudit(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, url)
	ctx := context.Background()
	c := client.New("http://" + addr)
	run, err := c.CreateRun(ctx, client.CreateRun{Input: "/call calculator {\"expression\":\"6*7\"}\n/say 42"})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range c.Events(ctx, run.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
	}
	var kinds []string
	for line, err := range c.RunAudit(ctx, run.ID) {
		if err != nil {
			t.Fatal(err)
		}
		var l struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, l.Kind)
	}
	if len(kinds) < 4 || kinds[0] != "run.created" || kinds[1] != "model.tool_calls" || kinds[len(kinds)-1] != "end" ||
		kinds[len(kinds)-2] != "run.ended" {
		t.Fatalf("the audit's lines: %v", kinds)
	}
	for _, err := range c.RunAudit(ctx, "01a23158-24d0-755c-8953-5268112791c4") {
		if !client.IsCode(err, "run_not_found") {
			t.Fatalf("the audit of a missing run: %v", err)
		}
	}
}
