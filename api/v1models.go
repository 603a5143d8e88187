package api

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"
)

// This file serves OpenAI's Models API under /v1 (GET /v1/models and
// GET /v1/models/{id}): the models this server offers, those of its
// models file and its default model, in OpenAI's shape. GET /models is
// agentd's fuller view of the same list (windows, prices, inputs).

// v1Model is a model as OpenAI's API lists it.
type v1Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelsLoaded is when this process read its models (Unix seconds): a
// model's created, since agentd does not know when a model was made.
var modelsLoaded = time.Now().Unix()

// ownedBy is every model's owned_by: the server that serves it, which is
// what agentd knows of who offers it (its maker is the provider's to say).
const ownedBy = "agentd"

// codeModelNotFound is OpenAI's code for a model that is not offered.
const codeModelNotFound = "model_not_found"

// v1Models are the server's models in OpenAI's shape, in GET /models'
// order (the default model first when the models file does not name it).
func (s *server) v1Models() []v1Model {
	out := make([]v1Model, 0, len(s.models))
	for _, m := range s.models {
		out = append(out, v1Model{ID: m.ID, Object: "model", Created: modelsLoaded, OwnedBy: ownedBy})
	}
	return out
}

// v1ModelList answers GET /v1/models.
func (s *server) v1ModelList(w http.ResponseWriter, r *http.Request) error {
	s.writeJSON(w, r, http.StatusOK, struct {
		Object string    `json:"object"`
		Data   []v1Model `json:"data"`
	}{"list", s.v1Models()})
	return nil
}

// v1ModelGet answers GET /v1/models/{id}: one of the server's models, or
// OpenAI's 404. An id with a slash comes escaped (%2F), as OpenAI's npm
// SDK sends it.
func (s *server) v1ModelGet(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	if u, err := url.PathUnescape(id); err == nil {
		id = u
	}
	for _, m := range s.v1Models() {
		if m.ID == id {
			s.writeJSON(w, r, http.StatusOK, m)
			return nil
		}
	}
	return newError(http.StatusNotFound, codeModelNotFound, "Model not found",
		fmt.Sprintf("The model '%s' does not exist or you do not have access to it.", id))
}
