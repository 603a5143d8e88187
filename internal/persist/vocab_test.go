package persist_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestSchemaAllowsTheVocabulary: the CHECK constraints of runs allow every
// run status and terminal reason the code has, so that none of them can
// make a run's end fail to commit.
func TestSchemaAllowsTheVocabulary(t *testing.T) {
	t.Parallel()
	url := persisttest.NewDatabase(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for constraint, values := range map[string][]string{
		"runs_status_check":          strs(agentd.RunStatuses()),
		"runs_terminal_reason_check": strs(agentd.Reasons()),
	} {
		var def string
		if err := conn.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1`,
			constraint).Scan(&def); err != nil {
			t.Fatalf("%s: %v", constraint, err)
		}
		for _, v := range values {
			if !strings.Contains(def, "'"+v+"'") {
				t.Errorf("%s does not allow %q: %s", constraint, v, def)
			}
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
