package api

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"agentd/internal/persist"
)

// Paging of GET /conversations/{id}/messages.
const (
	defaultMessageLimit = 100
	maxMessageLimit     = 1000
)

// conversationFor reads the conversation named by the path, for the
// request's tenant.
func (s *server) conversationFor(r *http.Request) (persist.Conversation, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return persist.Conversation{}, errConversationNotFound
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
	s.writeJSON(w, r, http.StatusOK, page(msgs, limit, messageView,
		func(m persist.Message) string { return encodeCursor(cursorMessages, strconv.Itoa(m.Seq)) }))
	return nil
}
