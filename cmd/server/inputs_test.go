package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/llm/fakeanthropic"
	"github.com/agentd/agentd/internal/llm/fakellm"
)

// The image and the PDF the input tests send.
const (
	testPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
	testPDF = "%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
)

// mediaMessage is a message of the text "/media" (the fakes answer with
// the images and files they received), a PNG and a PDF, and parts more.
func mediaMessage(more ...client.InputPart) []client.InputMessage {
	png, _ := base64.StdEncoding.DecodeString(testPNG)
	return []client.InputMessage{{Role: agentd.RoleUser, Content: "/media", Parts: append([]client.InputPart{
		client.ImageData("image/png", png), client.FileData("application/pdf", "report.pdf", []byte(testPDF))}, more...)}}
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
	s := setup(t, withEnv("AGENTD_MODELS_FILE", models), withEnv("TEST_OPENAI_KEY", "sk-test"),
		withEnv("TEST_ANTHROPIC_KEY", "sk-ant-test"), withEnv("AGENTD_MAX_INPUT_FILE_BYTES", "4096"))
	c, dbURL := s.Client, s.DBURL

	t.Run("openai", func(t *testing.T) {
		run, err := c.CreateRun(testCtx(t), client.CreateRun{Model: "vision", InputMessages: mediaMessage(), Wait: 20 * time.Second})
		want := "image image/png 70\nfile application/pdf 48 report.pdf"
		if err != nil || run.Status != agentd.StatusCompleted || run.OutputText == nil || *run.OutputText != want {
			t.Fatalf("%+v %v, want the answer %q", run, err, want)
		}
		reqs := oa.Requests()
		if got := fakellm.MediaAnswer(reqs[len(reqs)-1].Media); got != want {
			t.Fatalf("the model received %q", got)
		}
		storedOnce(t, dbURL, run.ConversationID)
	})

	t.Run("anthropic", func(t *testing.T) {
		run, err := c.CreateRun(testCtx(t), client.CreateRun{Model: "claude", InputMessages: mediaMessage(), Wait: 20 * time.Second})
		want := "image image/png 70\nfile application/pdf 48 report.pdf"
		if err != nil || run.Status != agentd.StatusCompleted || run.OutputText == nil || *run.OutputText != want {
			t.Fatalf("%+v %v, want the answer %q", run, err, want)
		}
		reqs := anth.Requests()
		if got := fakellm.MediaAnswer(reqs[len(reqs)-1].Media); got != want || reqs[len(reqs)-1].Model != "claude-test" {
			t.Fatalf("the model received %q", got)
		}
		storedOnce(t, dbURL, run.ConversationID)
	})

	t.Run("refused", func(t *testing.T) {
		image := func(url string) []client.InputMessage {
			return []client.InputMessage{{Role: agentd.RoleUser, Content: "see", Parts: []client.InputPart{client.ImageURL(url, "")}}}
		}
		for _, r := range []struct {
			name  string
			run   client.CreateRun
			field string
		}{
			{"a text-only model", client.CreateRun{Model: "texty", InputMessages: image("data:image/png;base64," + testPNG)}, "input[0].content[1]"},
			{"a text-only fallback", client.CreateRun{Models: []string{"vision", "texty"}, InputMessages: image("https://example.com/a.png")},
				"input[0].content[1]"},
			{"a bad data URL", client.CreateRun{Model: "vision", InputMessages: image("data:image/png;base64,not*base64")}, "input[0].content[1].url"},
			{"not a PNG", client.CreateRun{Model: "vision", InputMessages: image("data:image/png;base64,aGVsbG8=")}, "input[0].content[1]"},
			{"oversize", client.CreateRun{Model: "vision", InputMessages: []client.InputMessage{{Role: agentd.RoleUser,
				Parts: []client.InputPart{client.FileData("text/plain", "", []byte(strings.Repeat("x", 5000)))}}}}, "input[0].content[0]"},
		} {
			r.run.Wait = 20 * time.Second
			var e *client.Error
			if _, err := c.CreateRun(testCtx(t), r.run); !errors.As(err, &e) || e.Status != http.StatusUnprocessableEntity || e.Code != "invalid_field" || e.Field != r.field {
				t.Errorf("%s: %v, want 422 invalid_field naming %s", r.name, err, r.field)
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
