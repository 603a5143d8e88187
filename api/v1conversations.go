package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/responses"
)

// This file serves OpenAI's Conversations API under /v1: a conversation
// is an agentd conversation, its items are its messages (and their
// function calls), which its responses add, and which a client may add
// and delete between its responses.

// itemsError is OpenAI's answer for what the store refused about a
// conversation's items: a response in progress (409), or function calls
// that wait for their outputs (400, items).
func itemsError(err error) error {
	var busy *agentd.BusyError
	var pending *agentd.PendingCallsError
	switch {
	case errors.As(err, &busy):
		return newError(http.StatusConflict, CodeConversationBusy, "Conversation busy",
			fmt.Sprintf("the conversation has a response in progress (%s): change its items once it has ended",
				responses.ResponseID(busy.RunID)))
	case errors.As(err, &pending) && len(pending.Missing) > 0:
		return fieldError("items", "the conversation's latest response ended at function calls (%s) that wait for their outputs: "+
			"give them as function_call_output items in the input of the next response with this conversation, then add items",
			strings.Join(pending.Missing, ", "))
	case errors.As(err, &pending) && len(pending.MissingApprovals) > 0:
		ids := make([]string, len(pending.MissingApprovals))
		for i, id := range pending.MissingApprovals {
			ids[i] = responses.ApprovalRequestID(id)
		}
		return fieldError("items", "the conversation's latest response ended at approval requests (%s) that wait for a decision: "+
			"give them as mcp_approval_response items in the input of the next response with this conversation, then add items",
			strings.Join(ids, ", "))
	}
	return err
}

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

// v1ConversationCreate answers POST /v1/conversations: a new
// conversation with its metadata and its first items (at most 20), which
// are committed with it or not at all.
func (s *server) v1ConversationCreate(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	md, msgs, err := responses.DecodeConversation(body, true)
	if err != nil {
		return err
	}
	ctx, tenant := r.Context(), TenantFromContext(r.Context())
	var c agentd.Conversation
	if len(msgs) == 0 {
		c, err = s.store.ConversationCreate(ctx, tenant, "", md)
	} else {
		c, _, err = s.store.ConversationCreateWith(ctx, tenant, md, msgs)
	}
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
	md, _, err := responses.DecodeConversation(body, false)
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

// v1ConversationItemsCreate answers POST /v1/conversations/{id}/items: the
// items (1 to 20) appended to the conversation, after its last message and
// outside any response, in one transaction; the next response of the
// conversation is sent them as earlier turns. 409 while a response of it
// is in progress. The answer is the list of the items added.
func (s *server) v1ConversationItemsCreate(w http.ResponseWriter, r *http.Request) error {
	c, err := s.v1Conversation(r)
	if err != nil {
		return err
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkText(body); err != nil {
		return err
	}
	msgs, err := responses.DecodeItems(body)
	if err != nil {
		return err
	}
	added, err := s.store.MessagesAppend(r.Context(), c.TenantID, c.ID, msgs)
	if errors.Is(err, agentd.ErrConversationNotFound) { // deleted meanwhile
		return v1NotFound("", "Conversation", chi.URLParam(r, "id"))
	}
	if err != nil {
		return itemsError(err)
	}
	s.writeJSON(w, r, http.StatusOK, responses.AddedItems(added))
	return nil
}

// v1ConversationItemDelete answers DELETE /v1/conversations/{id}/items/{item_id}:
// the conversation, without the item. A message goes; the text of an
// assistant message that also made function calls goes, and its calls
// stay; a function call and its output are refused (400), since the
// model's API needs every call answered. 409 while a response of the
// conversation is in progress. A compaction that summarized the message
// goes with it (see persist.Store.MessageDelete).
func (s *server) v1ConversationItemDelete(w http.ResponseWriter, r *http.Request) error {
	c, err := s.v1Conversation(r)
	if err != nil {
		return err
	}
	id := chi.URLParam(r, "item_id")
	msg, ok := responses.MessageOfItem(id)
	if !ok {
		return v1NotFound("", "Item", id)
	}
	c, err = s.store.MessageDelete(r.Context(), c.TenantID, c.ID, msg, responses.ItemKeep(id))
	switch {
	case errors.Is(err, agentd.ErrConversationNotFound): // deleted meanwhile
		return v1NotFound("", "Conversation", chi.URLParam(r, "id"))
	case errors.Is(err, agentd.ErrNotFound):
		return v1NotFound("", "Item", id)
	case err != nil:
		return itemsError(err)
	}
	s.writeJSON(w, r, http.StatusOK, responses.ConversationObject(c))
	return nil
}
