package responses

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/runspec"
)

// Conversation is the Conversations API's conversation object: an agentd
// conversation.
type Conversation struct {
	ID        string            `json:"id"`
	Object    string            `json:"object"` // "conversation"
	CreatedAt int64             `json:"created_at"`
	Metadata  map[string]string `json:"metadata"`
}

// ConversationObject is the Conversations API's object of c. Metadata that is
// not a map of strings (set through /conversations) shows its string values.
func ConversationObject(c agentd.Conversation) Conversation {
	md := map[string]string{}
	var raw map[string]any
	if len(c.Metadata) > 0 && json.Unmarshal(c.Metadata, &raw) == nil {
		for k, v := range raw {
			if s, ok := v.(string); ok {
				md[k] = s
			}
		}
	}
	return Conversation{ID: ConversationID(c.ID), Object: "conversation", CreatedAt: c.CreatedAt.Unix(), Metadata: md}
}

// ConversationDeleted is the answer of DELETE /v1/conversations/{id}.
type ConversationDeleted struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "conversation.deleted"
	Deleted bool   `json:"deleted"`
}

// ConversationRequest is the body of POST /v1/conversations and of
// POST /v1/conversations/{id}: its metadata (and, on create, items, which
// agentd takes only as the input of a response).
type ConversationRequest struct {
	Metadata map[string]string `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

// DecodeConversation reads a conversation request strictly, and returns
// its metadata as agentd keeps it (a JSON object, or nothing). Items are
// refused: a conversation's items come from its responses.
func DecodeConversation(body []byte, create bool) (json.RawMessage, error) {
	var r ConversationRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := strict(body, &r); err != nil {
			return nil, decodeError(err)
		}
	}
	if len(r.Items) > 0 {
		return nil, field("items", "agentd adds items to a conversation only as the input and output of its responses: "+
			"create a response with this conversation")
	}
	if !create && r.Metadata == nil {
		return nil, field("metadata", "is required")
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return nil, err
	}
	if r.Metadata == nil {
		return nil, nil
	}
	b, err := json.Marshal(r.Metadata)
	if err != nil {
		return nil, err
	}
	return b, runspec.StorableJSON("metadata", b)
}

// ConversationItems are a conversation's messages as the Conversations API
// lists them, oldest first: input and output messages, the function calls
// of assistant messages, and their outputs.
func ConversationItems(msgs []agentd.Message) []Item {
	var items []Item
	for _, m := range msgs {
		status := StatusCompleted
		if m.Status != agentd.MessageCompleted {
			status = StatusInProgress
		}
		id := hexOf(m.ID)
		switch m.Role {
		case agentd.RoleTool:
			it := InputItem(m)
			it.Status = status
			items = append(items, it)
		case agentd.RoleAssistant:
			if text := agentd.TextOf(m.Content); text != "" {
				items = append(items, Item{ID: prefixMessage + id, Type: ItemMessage, Status: status, Role: "assistant",
					Content: []Content{outputText(text)}})
			}
			n := 0
			for _, p := range m.Content {
				if p.Type != agentd.PartToolCall {
					continue
				}
				items = append(items, Item{ID: prefixFunctionCall + id + "_" + strconv.Itoa(n), Type: ItemFunctionCall,
					Status: status, CallID: p.ID, Name: p.Name, Arguments: ptr(p.Arguments)})
				n++
			}
		default:
			it := InputItem(m)
			it.Status = status
			items = append(items, it)
		}
	}
	return items
}

// MessageOfItem returns the id of the message a conversation item's id names
// (msg_, fc_ with its call's place, fco_), and false for another id.
func MessageOfItem(itemID string) (string, bool) {
	for _, prefix := range []string{prefixFunctionCallOutput, prefixFunctionCall, prefixMessage} {
		rest, ok := strings.CutPrefix(itemID, prefix)
		if !ok {
			continue
		}
		if prefix == prefixFunctionCall {
			rest, _, _ = strings.Cut(rest, "_")
		}
		return idOf(prefixResponse+rest, prefixResponse)
	}
	return "", false
}
