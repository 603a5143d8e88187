package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/compose"
	"github.com/agentd/agentd/internal/tools"
)

// agentRequest is the body of POST /agents and PUT /agents/{name}.
type agentRequest struct {
	Name        *string `json:"name"`
	Description *string `json:"description"`
	compose.AgentDefinition
}

// Routes' defaults and bounds of the agents' lists.
const (
	defaultAgentLimit = 20
	maxAgentLimit     = 100
	cursorAgents      = "agents:"
	cursorVersions    = "agent_versions:"
)

var errAgentNotFound = newError(http.StatusNotFound, CodeAgentNotFound, "Agent not found", "the tenant has no agent of this name")

// agentRequestOf reads and checks the body of POST /agents or PUT
// /agents/{name}: its definition must build a run (with the server's
// tools and ceilings of today); name is the route's (empty for POST). The
// check it returns is the store's to run as it saves (no cycle of
// sub-agents).
func (s *server) agentRequestOf(w http.ResponseWriter, r *http.Request, name string) (agentd.AgentDefine, agentd.AgentCheck, error) {
	var in agentd.AgentDefine
	body, err := s.readBody(w, r)
	if err != nil {
		return in, nil, err
	}
	if err := checkText(body); err != nil {
		return in, nil, err
	}
	fields, def, err := agentFieldsOf(body)
	if err != nil {
		return in, nil, err
	}
	var req agentRequest
	if err := decodeStrict(fields, &req, ""); err != nil {
		return in, nil, err
	}
	if name, err = nameOf("agent", name, req.Name); err != nil {
		return in, nil, err
	}
	if d := req.Description; d != nil {
		if len(*d) > agentd.MaxAgentDescriptionBytes {
			return in, nil, fieldError("description", "must be at most %d bytes", agentd.MaxAgentDescriptionBytes)
		}
		in.Description = *d
	}
	check, err := s.compose.Define(r.Context(), TenantFromContext(r.Context()), name, req.AgentDefinition)
	if err != nil {
		return in, nil, err
	}
	in.Definition = def
	in.TenantID, in.Name, in.Actor = TenantFromContext(r.Context()), name, ActorFromContext(r.Context())
	return in, check, nil
}

// nameOf is the name of what a body of POST (route empty) or PUT (route:
// the route's name) declares, an agent or a tool: the body's name, which PUT
// may leave out and may not change; a name matches ^[a-zA-Z0-9_-]{1,64}$,
// as a tool's does.
func nameOf(what, route string, body *string) (string, error) {
	switch {
	case route == "" && body == nil:
		return "", fieldError("name", "is required: the %s's name, unique in the tenant", what)
	case route == "":
		route = *body
	case body != nil && *body != route:
		return "", fieldError("name", "%q is not the %s of this route, %q: it cannot be renamed", *body, what, route)
	}
	if !tools.ValidName(route) {
		return "", fieldError("name", "must match ^[a-zA-Z0-9_-]{1,64}$")
	}
	return route, nil
}

// agentViewKeys are the keys of an agent's view that a body may carry and
// that are not its definition's: what GET answers can be sent back as it
// is, and they are read-only.
var agentViewKeys = []string{"object", "version", "latest_version", "created_by", "created_at"}

// agentFieldsOf reads an agent's body: its fields but agentViewKeys, to be
// decoded strictly, and its definition, those but its name, description
// and null fields (its run fields as sent: keys sorted, JSON compacted).
func agentFieldsOf(body []byte) (fields, definition []byte, err error) {
	var all map[string]json.RawMessage
	if err := decodeStrict(body, &all, ""); err != nil {
		return nil, nil, err
	}
	for _, k := range agentViewKeys {
		delete(all, k)
	}
	if fields, err = json.Marshal(all); err != nil {
		return nil, nil, err
	}
	delete(all, "name")
	delete(all, "description")
	maps.DeleteFunc(all, func(_ string, v json.RawMessage) bool { return isNull(v) })
	def, err := json.Marshal(all)
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, def); err != nil {
		return nil, nil, err
	}
	if buf.Len() > agentd.MaxAgentDefinitionBytes {
		return nil, nil, fieldError("body", "the agent's definition must be at most %d bytes of JSON", agentd.MaxAgentDefinitionBytes)
	}
	return fields, buf.Bytes(), nil
}

func (s *server) agentCreate(w http.ResponseWriter, r *http.Request) error {
	in, check, err := s.agentRequestOf(w, r, "")
	if err != nil {
		return err
	}
	a, err := s.store.AgentCreate(r.Context(), in, check)
	if errors.Is(err, agentd.ErrAgentExists) {
		return newError(http.StatusConflict, CodeAgentExists, "Agent exists",
			fmt.Sprintf("the tenant has an agent named %q: PUT /agents/%s makes its next version", in.Name, in.Name))
	}
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/agents/"+a.Name)
	s.writeJSON(w, r, http.StatusCreated, a.View())
	return nil
}

func (s *server) agentUpdate(w http.ResponseWriter, r *http.Request) error {
	in, check, err := s.agentRequestOf(w, r, chi.URLParam(r, "name"))
	if err != nil {
		return err
	}
	a, err := s.store.AgentUpdate(r.Context(), in, check)
	if err != nil {
		return agentError(err)
	}
	s.writeJSON(w, r, http.StatusOK, a.View())
	return nil
}

func (s *server) agentGet(w http.ResponseWriter, r *http.Request) error {
	a, err := s.store.AgentGet(r.Context(), TenantFromContext(r.Context()), chi.URLParam(r, "name"), 0)
	if err != nil {
		return agentError(err)
	}
	s.writeJSON(w, r, http.StatusOK, a.View())
	return nil
}

func (s *server) agentVersionGet(w http.ResponseWriter, r *http.Request) error {
	n, err := strconv.Atoi(chi.URLParam(r, "version"))
	if err != nil || n < 1 {
		return fieldError("version", "must be a version number, 1 or more")
	}
	a, err := s.store.AgentGet(r.Context(), TenantFromContext(r.Context()), chi.URLParam(r, "name"), n)
	var version *agentd.AgentVersionError
	if errors.As(err, &version) {
		return newError(http.StatusNotFound, CodeAgentNotFound, "Agent version not found", version.Error())
	}
	if err != nil {
		return agentError(err)
	}
	s.writeJSON(w, r, http.StatusOK, a.View())
	return nil
}

func (s *server) agentList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultAgentLimit, 1, maxAgentLimit)
	if err != nil {
		return err
	}
	var after string
	if v := q.Get("cursor"); v != "" {
		if after, err = decodeCursor(v, cursorAgents); err != nil {
			return err
		}
	}
	agents, err := s.store.AgentList(r.Context(), TenantFromContext(r.Context()), after, limit+1)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(agents, limit, agentd.Agent.View,
		func(a agentd.Agent) string { return encodeCursor(cursorAgents, a.Name) }))
	return nil
}

func (s *server) agentVersions(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", defaultAgentLimit, 1, maxAgentLimit)
	if err != nil {
		return err
	}
	before := 0
	if v := q.Get("cursor"); v != "" {
		pos, err := decodeCursor(v, cursorVersions)
		if err != nil {
			return err
		}
		if before, err = strconv.Atoi(pos); err != nil || before < 1 {
			return errBadCursor
		}
	}
	versions, err := s.store.AgentVersions(r.Context(), TenantFromContext(r.Context()), chi.URLParam(r, "name"), before, limit+1)
	if err != nil {
		return agentError(err)
	}
	s.writeJSON(w, r, http.StatusOK, page(versions, limit, agentd.Agent.View,
		func(a agentd.Agent) string { return encodeCursor(cursorVersions, strconv.Itoa(a.Version)) }))
	return nil
}

func (s *server) agentDelete(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := s.store.AgentDelete(ctx, TenantFromContext(ctx), chi.URLParam(r, "name"), ActorFromContext(ctx)); err != nil {
		return agentError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// agentError is the problem of an agent's route that names no agent of the
// tenant.
func agentError(err error) error {
	if errors.Is(err, agentd.ErrAgentNotFound) {
		return errAgentNotFound
	}
	return err
}
