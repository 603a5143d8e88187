package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/persist"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestReadReplicaServesTheAPI: agentd started with
// AGENTD_DATABASE_REPLICA_URL on a real streaming standby says so, lists
// runs and replays a run's stream from it once it has caught up (the
// stream is the run's stored log, exactly), and counts what the replica
// served in /metrics.
func TestReadReplicaServesTheAPI(t *testing.T) {
	t.Parallel()
	pair := persisttest.NewPair(t)
	logs := &logBuffer{}
	base := startLogged(t, pair.PrimaryURL(), map[string]string{"AGENTD_DATABASE_REPLICA_URL": pair.StandbyURL(),
		"AGENTD_DATABASE_REPLICA_MAX_LAG": "2s"}, logs)
	c := client.New(base)
	id := startRun(t, c, "/stream 30 5")
	waitStatus(t, c, id, agentd.StatusCompleted)
	pair.WaitReplayed()
	metric := func(name string) float64 {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("/metrics has no %s", name)
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	for deadline := time.Now().Add(20 * time.Second); metric("agentd_db_replica_serving") != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the replica does not serve 20s after it replayed everything")
		}
	}
	before := metric("agentd_db_replica_reads_total")
	if list, err := c.ListRuns(testCtx(t), client.ListRuns{}); err != nil || len(list.Data) != 1 || list.Data[0].ID != id {
		t.Fatalf("ListRuns: %+v %v, want the run", list, err)
	}
	// The stream raw: its data is compared, byte for byte, with the log.
	resp := getEvents(t, base, id, "")
	got := readEvents(t, resp.Body, nil)
	resp.Body.Close()
	store := persisttest.Open(t, persist.Config{URL: pair.PrimaryURL(), MaxConns: 2})
	stored, err := store.EventsAfter(context.Background(), id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(stored) || len(got) < 5 {
		t.Fatalf("the replayed stream has %d events, the stored log %d", len(got), len(stored))
	}
	for i, ev := range got {
		if ev.ID != strconv.FormatInt(stored[i].Seq, 10) || ev.Data != string(stored[i].Data) {
			t.Fatalf("event %d: %s %s, stored %d %s", i, ev.ID, ev.Data, stored[i].Seq, stored[i].Data)
		}
	}
	if after := metric("agentd_db_replica_reads_total"); after < before+2 {
		t.Fatalf("the replica served %v reads for a list and a replay, want at least 2", after-before)
	}
	if !strings.Contains(logs.String(), `"read_replica":true`) || logs.count("the read replica serves reads that tolerate lag") == 0 {
		t.Fatalf("the log does not say the replica is configured and serving:\n%s", logs)
	}
}
