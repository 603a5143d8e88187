package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/internal/llm/fakeanthropic"
	"github.com/agentd/agentd/internal/llm/fakellm"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// The image and the PDF the input tests send.
const (
	testPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
	testPDF = "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
)

// postRunWait sends body to POST /runs?wait=20 and returns the status and the
// answer.
func postRunWait(t *testing.T, base string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(base+"/runs?wait=20", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST /runs answered %d %s", resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// mediaInput is a message of the text "/media" (the fakes answer with the
// images and files they received), a PNG as a data URL and a PDF as base64.
func mediaInput() []any {
	return []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "/media"},
		map[string]any{"type": "image", "url": "data:image/png;base64," + testPNG},
		map[string]any{"type": "file", "data": base64.StdEncoding.EncodeToString([]byte(testPDF)), "media_type": "application/pdf",
			"filename": "report.pdf"},
	}}}
}

// TestInputFiles: an image and a PDF given to POST /runs are stored once,
// as artifacts (the message rows hold references, not bytes), and reach
// each provider's model in its own form through its real SDK client: the
// OpenAI adapter's against fakellm, the Anthropic adapter's against the
// fake Messages API, each of which says what it received (/media). A
// model whose profile takes text alone is refused the image with a 422
// naming the part, as are a bad data URL and a file past
// AGENTD_MAX_INPUT_FILE_BYTES, and nothing of them is stored.
func TestInputFiles(t *testing.T) {
	t.Parallel()
	oa := fakellm.New()
	osrv := httptest.NewServer(oa)
	t.Cleanup(osrv.Close)
	anth, asrv := fakeanthropic.Start()
	t.Cleanup(asrv.Close)
	models := filepath.Join(t.TempDir(), "models.json")
	file := fmt.Sprintf(`{"models": {
		"vision": {"provider": "openai", "base_url": %q, "api_key_env": "TEST_OPENAI_KEY", "context_window": 128000, "input": ["text", "image", "file"]},
		"claude": {"provider": "anthropic", "base_url": %q, "api_key_env": "TEST_ANTHROPIC_KEY", "model": "claude-test", "context_window": 200000},
		"texty": {"provider": "openai", "base_url": %q, "api_key_env": "TEST_OPENAI_KEY", "context_window": 128000, "input": ["text"]}}}`,
		osrv.URL+"/v1", asrv.URL, osrv.URL+"/v1")
	if err := os.WriteFile(models, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := persisttest.NewDatabase(t)
	base, _ := startServer(t, map[string]string{"DATABASE_URL": dbURL, "AGENTD_MODELS_FILE": models, "TEST_OPENAI_KEY": "sk-test",
		"TEST_ANTHROPIC_KEY": "sk-ant-test", "AGENTD_MAX_INPUT_FILE_BYTES": "4096"})

	t.Run("openai", func(t *testing.T) {
		status, run := postRunWait(t, base, map[string]any{"model": "vision", "input": mediaInput()})
		want := "image image/png 70\nfile application/pdf 48 report.pdf"
		if status != http.StatusOK || run["status"] != "completed" || run["output_text"] != want {
			t.Fatalf("%d %v, want the answer %q", status, run, want)
		}
		reqs := oa.Requests()
		if got := fakellm.MediaAnswer(reqs[len(reqs)-1].Media); got != want {
			t.Fatalf("the model received %q", got)
		}
		storedOnce(t, dbURL, run["conversation_id"].(string))
	})

	t.Run("anthropic", func(t *testing.T) {
		status, run := postRunWait(t, base, map[string]any{"model": "claude", "input": mediaInput()})
		want := "image image/png 70\nfile application/pdf 48 report.pdf"
		if status != http.StatusOK || run["status"] != "completed" || run["output_text"] != want {
			t.Fatalf("%d %v, want the answer %q", status, run, want)
		}
		reqs := anth.Requests()
		if got := fakellm.MediaAnswer(reqs[len(reqs)-1].Media); got != want || reqs[len(reqs)-1].Model != "claude-test" {
			t.Fatalf("the model received %q", got)
		}
		storedOnce(t, dbURL, run["conversation_id"].(string))
	})

	t.Run("refused", func(t *testing.T) {
		image := func(url string) []any {
			return []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "see"},
				map[string]any{"type": "image", "url": url}}}}
		}
		big := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", 5000)))
		for _, c := range []struct {
			name  string
			body  map[string]any
			field string
		}{
			{"a text-only model", map[string]any{"model": "texty", "input": image("data:image/png;base64," + testPNG)}, "input[0].content[1]"},
			{"a text-only fallback", map[string]any{"models": []string{"vision", "texty"}, "input": image("https://example.com/a.png")},
				"input[0].content[1]"},
			{"a bad data URL", map[string]any{"model": "vision", "input": image("data:image/png;base64,not*base64")}, "input[0].content[1].url"},
			{"not a PNG", map[string]any{"model": "vision", "input": image("data:image/png;base64,aGVsbG8=")}, "input[0].content[1]"},
			{"oversize", map[string]any{"model": "vision", "input": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "file", "data": "data:text/plain;base64," + big}}}}}, "input[0].content[0]"},
		} {
			status, p := postRunWait(t, base, c.body)
			if status != http.StatusUnprocessableEntity || p["code"] != "invalid_field" || p["field"] != c.field {
				t.Errorf("%s: %d %v, want 422 invalid_field naming %s", c.name, status, p, c.field)
			}
		}
	})

	// Only the two runs above were stored, with their four artifacts.
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var runs, arts int
	if err := conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM artifacts)`).Scan(&runs, &arts); err != nil {
		t.Fatal(err)
	}
	if runs != 2 || arts != 4 {
		t.Fatalf("%d runs and %d artifacts stored, want 2 and 4", runs, arts)
	}
}

// storedOnce checks the rows of a conversation whose first message held
// the test's PNG and PDF: the message's content names two artifacts and
// holds none of their bytes, and the artifacts hold them.
func storedOnce(t *testing.T, dbURL, conversationID string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var content string
	if err := conn.QueryRow(ctx, `SELECT content::text FROM messages WHERE conversation_id = $1 AND role = 'user'`,
		conversationID).Scan(&content); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(content, testPNG[:20]) || strings.Contains(content, "PDF-1.4") || strings.Count(content, `"artifact_id"`) != 2 {
		t.Fatalf("the message row holds %s", content)
	}
	rows, err := conn.Query(ctx, `SELECT media_type, content FROM artifacts WHERE conversation_id = $1 AND tool_call_id IS NULL
		ORDER BY media_type`, conversationID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var mt string
		var b []byte
		if err := rows.Scan(&mt, &b); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %d", mt, len(b)))
	}
	if strings.Join(got, ", ") != "application/pdf 48, image/png 70" {
		t.Fatalf("the conversation's artifacts: %v", got)
	}
}
