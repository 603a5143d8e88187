package api

import (
	"net/http"

	"github.com/agentd/agentd"
)

// modelsList answers GET /models: the models this server offers (the
// models file's, and the default model), for any tenant.
func (s *server) modelsList(w http.ResponseWriter, r *http.Request) error {
	out := listJSON[agentd.ModelView]{Data: s.models}
	if out.Data == nil {
		out.Data = []agentd.ModelView{}
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}
