package api_test

import (
	"net/http"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/api"
	"github.com/agentd/agentd/internal/persist/persisttest"
)

// TestV1Models: GET /v1/models lists the server's models (GET /models')
// in OpenAI's shape, and GET /v1/models/{id} reads one (an id with a slash
// escaped, as OpenAI's npm SDK sends it); another is OpenAI's 404.
func TestV1Models(t *testing.T) {
	t.Parallel()
	store, _ := persisttest.New(t)
	b := setupWith(t, store, store, func(c *api.Config) {
		c.Models = []agentd.ModelView{{ID: "test-model", Object: agentd.ObjectModel, Default: true, ContextWindow: 128000},
			{ID: "local/llama", Object: agentd.ObjectModel, ContextWindow: 32000}}
	})
	type model struct {
		ID, Object string
		Created    int64
		OwnedBy    string `json:"owned_by"`
	}
	list := want[struct {
		Object string
		Data   []model
	}](t, b.do("GET", "/v1/models", ""), http.StatusOK)
	if list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != "test-model" || list.Data[1].ID != "local/llama" {
		t.Fatalf("list %+v", list)
	}
	for _, m := range list.Data {
		if m.Object != "model" || m.Created <= 0 || m.OwnedBy != "agentd" {
			t.Fatalf("model %+v", m)
		}
	}
	if m := want[model](t, b.do("GET", "/v1/models/test-model", ""), http.StatusOK); m != list.Data[0] {
		t.Fatalf("model %+v, want %+v", m, list.Data[0])
	}
	if m := want[model](t, b.do("GET", "/v1/models/local%2Fllama", ""), http.StatusOK); m != list.Data[1] {
		t.Fatalf("model %+v, want %+v", m, list.Data[1])
	}
	if _, msg := v1Err(t, b.do("GET", "/v1/models/gpt-9", ""), http.StatusNotFound, "model_not_found"); msg !=
		"The model 'gpt-9' does not exist or you do not have access to it." {
		t.Fatalf("message %q", msg)
	}
	v1Err(t, b.do("GET", "/v1/models?limit=3", ""), http.StatusBadRequest, "unknown_parameter")
	// Codex sends its version, which changes nothing.
	if l := want[struct{ Data []model }](t, b.do("GET", "/v1/models?client_version=0.99.0", ""), http.StatusOK); len(l.Data) != 2 {
		t.Fatalf("list %+v", l)
	}
	// A server given no models lists an empty list, never null.
	empty := setupWith(t, store, store)
	if l := want[struct{ Data []model }](t, empty.do("GET", "/v1/models", ""), http.StatusOK); l.Data == nil || len(l.Data) != 0 {
		t.Fatalf("list %+v", l)
	}
}
