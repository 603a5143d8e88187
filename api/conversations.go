package api

import (
	"net/http"

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

// messagesList answers GET /conversations/{id}/messages: the messages after
// seq "after", in order, a page at a time.
func (s *server) messagesList(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	after, err := intParam(q, "after", 0, 0, 1<<31-1)
	if err != nil {
		return err
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
	out := messageListJSON{Data: make([]messageJSON, 0, min(len(msgs), limit))}
	if len(msgs) > limit {
		msgs = msgs[:limit]
		next := msgs[limit-1].Seq
		out.NextAfter = &next
	}
	for _, m := range msgs {
		out.Data = append(out.Data, messageView(m))
	}
	s.writeJSON(w, r, http.StatusOK, out)
	return nil
}
