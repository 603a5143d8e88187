package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/agentd/agentd"
)

// Paging of GET /conversations/{id}/messages.
const (
	defaultMessageLimit = 100
	maxMessageLimit     = 1000
)

// conversationFor reads the conversation named by the path, for the
// request's tenant.
func (s *server) conversationFor(r *http.Request) (agentd.Conversation, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return agentd.Conversation{}, errConversationNotFound
	}
	return s.store.ConversationGet(r.Context(), TenantFromContext(r.Context()), id.String())
}

func (s *server) conversationGet(w http.ResponseWriter, r *http.Request) error {
	c, err := s.conversationFor(r)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, conversationView(c))
	return nil
}

// messagesList answers GET /conversations/{id}/messages: the messages in
// order, a page at a time.
func (s *server) messagesList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	after := 0
	if v := q.Get("cursor"); v != "" {
		pos, err := decodeCursor(v, cursorMessages)
		if err != nil {
			return err
		}
		if after, err = strconv.Atoi(pos); err != nil || after < 0 {
			return errBadCursor
		}
	}
	limit, err := intParam(q, "limit", defaultMessageLimit, 1, maxMessageLimit)
	if err != nil {
		return err
	}
	c, err := s.conversationFor(r)
	if err != nil {
		return err
	}
	msgs, err := s.store.MessagesList(r.Context(), c.ID, after, limit+1)
	if err != nil {
		return err
	}
	coversTo, firstUser, err := s.store.ContextWindow(r.Context(), c.ID)
	if err != nil {
		return err
	}
	view := func(m agentd.Message) messageJSON {
		v := messageView(m)
		v.InContext = v.InContext && (m.Seq > coversTo || m.Seq == firstUser)
		return v
	}
	s.writeJSON(w, r, http.StatusOK, page(msgs, limit, view,
		func(m agentd.Message) string { return encodeCursor(cursorMessages, strconv.Itoa(m.Seq)) }))
	return nil
}

// Paging of GET /conversations.
const (
	defaultConversationLimit = 20
	maxConversationLimit     = 100
	maxTitleBytes            = 1000
)

// conversationRequest is the body of POST /conversations and of PATCH
// /conversations/{id}: an absent field is left as it is (or empty).
type conversationRequest struct {
	Title    *string         `json:"title"`
	Metadata json.RawMessage `json:"metadata"`
}

func (s *server) readConversation(w http.ResponseWriter, r *http.Request) (title *string, metadata json.RawMessage, err error) {
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, nil, err
	}
	var req conversationRequest
	if err := decodeStrict(body, &req, ""); err != nil {
		return nil, nil, err
	}
	if err := checkText(body); err != nil {
		return nil, nil, err
	}
	if req.Title != nil {
		if len(*req.Title) > maxTitleBytes {
			return nil, nil, fieldError("title", "must be at most %d bytes", maxTitleBytes)
		}
		if err := storable("title", *req.Title); err != nil {
			return nil, nil, err
		}
	}
	if !isNull(req.Metadata) {
		if metadata, err = parseMetadata(req.Metadata); err != nil {
			return nil, nil, err
		}
	}
	return req.Title, metadata, nil
}

// conversationCreate answers POST /conversations: 201 and the new, empty
// conversation, which runs then name by conversation_id.
func (s *server) conversationCreate(w http.ResponseWriter, r *http.Request) error {
	title, metadata, err := s.readConversation(w, r)
	if err != nil {
		return err
	}
	c, err := s.store.ConversationCreate(r.Context(), TenantFromContext(r.Context()), deref(title), metadata)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/conversations/"+c.ID)
	s.writeJSON(w, r, http.StatusCreated, conversationView(c))
	return nil
}

// conversationUpdate answers PATCH /conversations/{id}: the title and the
// metadata given are set (metadata as a whole).
func (s *server) conversationUpdate(w http.ResponseWriter, r *http.Request) error {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return errConversationNotFound
	}
	title, metadata, err := s.readConversation(w, r)
	if err != nil {
		return err
	}
	c, err := s.store.ConversationUpdate(r.Context(), TenantFromContext(r.Context()), id.String(), title, metadata)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, conversationView(c))
	return nil
}

// runForgetter is what Events may also do: forget deleted runs, whose open
// streams end and whose new ones are 404 (stream.Hub.Forget).
type runForgetter interface {
	Forget(runIDs ...string)
}

// conversationDelete answers DELETE /conversations/{id}: 204 once the
// conversation and everything under it are gone, and the streams of its
// runs on this instance have been told to end (other instances' end within
// their poll interval); 409 conversation_busy while one of its runs is in
// progress.
func (s *server) conversationDelete(w http.ResponseWriter, r *http.Request) error {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return errConversationNotFound
	}
	runIDs, err := s.store.ConversationDelete(r.Context(), TenantFromContext(r.Context()), id.String())
	if err != nil {
		return err
	}
	if f, ok := s.events.(runForgetter); ok && len(runIDs) > 0 {
		f.Forget(runIDs...)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// conversationList answers GET /conversations: the tenant's conversations,
// newest first, a page at a time; metadata.KEY=VALUE keeps those whose
// metadata has KEY with the string VALUE.
func (s *server) conversationList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	p := agentd.ConversationListParams{TenantID: TenantFromContext(r.Context())}
	for name, vs := range q {
		key, ok := strings.CutPrefix(name, "metadata.")
		if !ok {
			continue
		}
		if key == "" || len(vs) != 1 {
			return fieldError(name, "give one metadata.KEY=VALUE per key")
		}
		if err := storable(name, key+vs[0]); err != nil {
			return err
		}
		if p.Metadata == nil {
			p.Metadata = map[string]string{}
		}
		p.Metadata[key] = vs[0]
	}
	limit, err := intParam(q, "limit", defaultConversationLimit, 1, maxConversationLimit)
	if err != nil {
		return err
	}
	if v := q.Get("chat_id"); v != "" {
		if err := storable("chat_id", v); err != nil {
			return err
		}
		p.ChatID = v
	}
	if v := q.Get("cursor"); v != "" {
		if p.Before, err = decodeCursor(v, cursorConversations); err != nil {
			return err
		}
		if _, err := uuid.Parse(p.Before); err != nil {
			return errBadCursor
		}
	}
	p.Limit = limit + 1
	// A listing may lag, as a read replica does; the conversation of a
	// chat is looked up exactly.
	p.MayLag = p.ChatID == ""
	cs, err := s.store.ConversationList(r.Context(), p)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page(cs, limit, conversationView,
		func(c agentd.Conversation) string { return encodeCursor(cursorConversations, c.ID) }))
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
