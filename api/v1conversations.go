package api

import (
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/responses"
)

// This file serves OpenAI's Conversations API under /v1: a conversation
// is an agentd conversation, its items are its messages (and their
// function calls), which its responses add.

// v1Conversation reads the conversation of the {id} of the path (conv_…),
// for the tenant.
func (s *server) v1Conversation(r *http.Request) (agentd.Conversation, error) {
	id := chi.URLParam(r, "id")
	conv, ok := responses.ConversationOf(id)
	if !ok {
		return agentd.Conversation{}, v1NotFound("", "Conversation", id)
	}
	c, err := s.store.ConversationGet(r.Context(), TenantFromContext(r.Context()), conv)
	if errors.Is(err, agentd.ErrConversationNotFound) {
		return c, v1NotFound("", "Conversation", id)
	}
	return c, err
}

// v1ConversationCreate answers POST /v1/conversations: a new, empty
// conversation with its metadata.
func (s *server) v1ConversationCreate(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	md, err := responses.DecodeConversation(body, true)
	if err != nil {
		return err
	}
	c, err := s.store.ConversationCreate(r.Context(), TenantFromContext(r.Context()), "", md)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, responses.ConversationObject(c))
	return nil
}

// v1ConversationGet answers GET /v1/conversations/{id}.
func (s *server) v1ConversationGet(w http.ResponseWriter, r *http.Request) error {
	c, err := s.v1Conversation(r)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, responses.ConversationObject(c))
	return nil
}

// v1ConversationUpdate answers POST /v1/conversations/{id}: its metadata
// replaced.
func (s *server) v1ConversationUpdate(w http.ResponseWriter, r *http.Request) error {
	c, err := s.v1Conversation(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	md, err := responses.DecodeConversation(body, false)
	if err != nil {
		return err
	}
	if md == nil {
		md = []byte(`{}`)
	}
	if c, err = s.store.ConversationUpdate(r.Context(), c.TenantID, c.ID, nil, md); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, responses.ConversationObject(c))
	return nil
}

// v1ConversationDelete answers DELETE /v1/conversations/{id}: the
// conversation with everything under it; 409 while a response of it is in
// progress.
func (s *server) v1ConversationDelete(w http.ResponseWriter, r *http.Request) error {
	c, err := s.v1Conversation(r)
	if err != nil {
		return err
	}
	ids, err := s.store.ConversationDelete(r.Context(), c.TenantID, c.ID)
	if err != nil {
		return err
	}
	if f, ok := s.events.(runForgetter); ok && len(ids) > 0 {
		f.Forget(ids...)
	}
	s.writeJSON(w, r, http.StatusOK, responses.ConversationDeleted{ID: responses.ConversationID(c.ID),
		Object: "conversation.deleted", Deleted: true})
	return nil
}

// conversationItems reads every item of conversation c, oldest first.
func (s *server) conversationItems(r *http.Request, c agentd.Conversation) ([]responses.Item, error) {
	var msgs []agentd.Message
	for after := 0; ; {
		page, err := s.store.MessagesList(r.Context(), c.ID, after, 500)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, page...)
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].Seq
	}
	return responses.ConversationItems(msgs), nil
}

// v1ConversationItems answers GET /v1/conversations/{id}/items: a page of
// its items (after, limit 1 to 100, order desc by default, as OpenAI's).
func (s *server) v1ConversationItems(w http.ResponseWriter, r *http.Request) error {
	c, err := s.v1Conversation(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, order, err := itemPaging(q)
	if err != nil {
		return err
	}
	items, err := s.conversationItems(r, c)
	if err != nil {
		return err
	}
	page, err := responses.Page(items, order, q.Get("after"), "", limit)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, page)
	return nil
}

// v1ConversationItem answers GET /v1/conversations/{id}/items/{item_id}.
func (s *server) v1ConversationItem(w http.ResponseWriter, r *http.Request) error {
	c, err := s.v1Conversation(r)
	if err != nil {
		return err
	}
	id := chi.URLParam(r, "item_id")
	if _, ok := responses.MessageOfItem(id); ok {
		items, err := s.conversationItems(r, c)
		if err != nil {
			return err
		}
		for _, it := range items {
			if it.ID == id {
				s.writeJSON(w, r, http.StatusOK, it)
				return nil
			}
		}
	}
	return v1NotFound("", "Item", id)
}
