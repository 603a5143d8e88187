package api

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/agentd/agentd"
)

// instructionsRequest is the body of PUT /instructions.
type instructionsRequest struct {
	Text *string `json:"text"`
}

// instructionsGet answers GET /instructions: the tenant's managed
// instructions, with a null text when it has none.
func (s *server) instructionsGet(w http.ResponseWriter, r *http.Request) error {
	m, err := s.store.InstructionsGet(r.Context(), TenantFromContext(r.Context()))
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, m.View())
	return nil
}

// instructionsPut answers PUT /instructions: it sets the tenant's managed
// instructions, at their next version, which every run of the tenant
// created from now on is given first in its system prompt; runs created
// before keep the version they were given.
func (s *server) instructionsPut(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	var req instructionsRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return err
	}
	switch {
	case req.Text == nil || strings.TrimSpace(*req.Text) == "":
		return fieldError("text", "is required: the instructions, a non-empty text (DELETE /instructions removes them)")
	case len(*req.Text) > agentd.MaxManagedInstructionsBytes:
		return fieldError("text", "must be at most %d bytes", agentd.MaxManagedInstructionsBytes)
	}
	if err := storable("text", *req.Text); err != nil {
		return err
	}
	ctx := r.Context()
	tenant, actor := TenantFromContext(ctx), ActorFromContext(ctx)
	m, err := s.store.InstructionsPut(ctx, tenant, *req.Text, actor)
	if err != nil {
		return err
	}
	s.log.InfoContext(ctx, "audit: managed instructions set", slog.Bool("audit", true), slog.String("actor", actor),
		slog.String("tenant_id", tenant), slog.Int("version", m.Version), slog.String("request_id", requestIDFrom(ctx)))
	s.writeJSON(w, r, http.StatusOK, m.View())
	return nil
}

// instructionsDelete answers DELETE /instructions: the tenant's runs
// created from now on are given no managed instructions (204, also when
// it had none).
func (s *server) instructionsDelete(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	tenant, actor := TenantFromContext(ctx), ActorFromContext(ctx)
	if err := s.store.InstructionsDelete(ctx, tenant, actor); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "audit: managed instructions deleted", slog.Bool("audit", true), slog.String("actor", actor),
		slog.String("tenant_id", tenant), slog.String("request_id", requestIDFrom(ctx)))
	w.WriteHeader(http.StatusNoContent)
	return nil
}
