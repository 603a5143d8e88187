package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist/persisttest"
	"github.com/agentd/agentd/internal/servertest"
)

// TestMemoryCommands: agentctl writes, reads, lists, searches, deletes and
// purges memory items; a purge needs its prefix confirmed.
func TestMemoryCommands(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	base := "http://" + addr
	if r := ctl(t, base, "memory", "put", "-data", `{"kind":"fact"}`, "users/u1", "home", "lives in Lisbon"); r.code != exitOK ||
		!strings.Contains(r.stdout, "version") || !strings.Contains(r.stdout, "lives in Lisbon") {
		t.Fatalf("put: %s", r)
	}
	if r := ctl(t, base, "memory", "put", "-if-version", "1", "users/u1", "home", "lives in Porto"); r.code != exitOK {
		t.Fatalf("put again: %s", r)
	}
	if r := ctl(t, base, "memory", "put", "-if-version", "1", "users/u1", "home", "x"); r.code != exitError ||
		!strings.Contains(r.stderr, "memory_version_conflict") {
		t.Fatalf("stale put: %s", r)
	}
	if r := ctl(t, base, "memory", "get", "users/u1", "home"); r.code != exitOK || !strings.Contains(r.stdout, "Porto") {
		t.Fatalf("get: %s", r)
	}
	if r := ctl(t, base, "memory", "versions", "users/u1", "home"); r.code != exitOK || !strings.Contains(r.stdout, "Lisbon") ||
		!strings.Contains(r.stdout, "Porto") {
		t.Fatalf("versions: %s", r)
	}
	if r := ctl(t, base, "memory", "ls", "users"); r.code != exitOK || !strings.Contains(r.stdout, "users/u1") {
		t.Fatalf("ls: %s", r)
	}
	r := ctl(t, base, "-o", "json", "memory", "search", "-prefix", "users", "Porto")
	var hits []client.MemoryHit
	if err := json.Unmarshal([]byte(r.stdout), &hits); err != nil || len(hits) != 1 || hits[0].Key != "home" {
		t.Fatalf("search: %v %s", err, r)
	}
	if r := ctl(t, base, "memory", "rm", "users/u1", "home"); r.code != exitOK || !strings.Contains(r.stdout, "deleted") {
		t.Fatalf("rm: %s", r)
	}
	if r := ctl(t, base, "memory", "purge", "users"); r.code != exitError || !strings.Contains(r.stderr, "-confirm") {
		t.Fatalf("purge unconfirmed: %s", r)
	}
	if r := ctl(t, base, "memory", "purge", "-confirm", "users", "users"); r.code != exitOK || !strings.Contains(r.stdout, "1 items, 3 versions") {
		t.Fatalf("purge: %s", r)
	}
}

// TestMemoryExtractionsCommand: memory extractions lists a completed
// run's extraction with its status and the items it wrote, -run keeps that
// run's alone, and -o json gives the API's page.
func TestMemoryExtractionsCommand(t *testing.T) {
	t.Parallel()
	addr := servertest.FreeAddr(t)
	servertest.Start(t, addr, persisttest.NewDatabase(t))
	base := "http://" + addr
	resp, err := http.Post(base+"/runs", "application/json", strings.NewReader(`{"input": "I moved to Porto.\n/remember home=Porto\n/say Noted.",
		"user": "ann", "memory": {"search": ["users/{{user}}"], "extract": {"namespace": ["users", "{{user}}"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var run struct{ ID string }
	err = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /runs: %d %v", resp.StatusCode, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := ctl(t, base, "-o", "json", "memory", "extractions", "-run", run.ID)
		var page client.Page[client.MemoryExtraction]
		if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || r.code != exitOK {
			t.Fatalf("extractions -o json: %v %s", err, r)
		}
		if len(page.Data) == 1 && page.Data[0].Status == agentd.ExtractionDone {
			if page.Data[0].Items != 1 || page.Data[0].RunID != run.ID {
				t.Fatalf("the extraction: %+v", page.Data[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no extraction done for run %s: %s", run.ID, r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := ctl(t, base, "memory", "extractions")
	if r.code != exitOK || !strings.Contains(r.stdout, run.ID) || !strings.Contains(r.stdout, "users/ann") ||
		!strings.Contains(r.stdout, "done") {
		t.Fatalf("extractions: %s", r)
	}
	if r := ctl(t, base, "memory", "extractions", "-run", "not-a-run"); r.code != exitError {
		t.Fatalf("extractions of a bad run id: %s", r)
	}
}
