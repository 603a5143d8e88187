package responses

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
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

// MaxConversationItems is how many items one request may add to a
// conversation, as OpenAI's API bounds it.
const MaxConversationItems = 20

// ConversationRequest is the body of POST /v1/conversations and of
// POST /v1/conversations/{id}: its metadata and, on create, its first
// items.
type ConversationRequest struct {
	Metadata map[string]string `json:"metadata"`
	Items    []json.RawMessage `json:"items"`
}

// DecodeConversation reads a conversation request strictly, and returns
// its metadata as agentd keeps it (a JSON object, or nothing) and, on
// create, its items as the messages that begin the conversation (see
// ItemMessages). An update takes metadata only: items are added with
// POST /v1/conversations/{id}/items.
func DecodeConversation(body []byte, create bool) (json.RawMessage, []agentd.InputMessage, error) {
	var r ConversationRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := strict(body, &r); err != nil {
			return nil, nil, decodeError(err)
		}
	}
	var msgs []agentd.InputMessage
	if !create && len(r.Items) > 0 {
		return nil, nil, field("items", "are added to a conversation with POST /v1/conversations/{id}/items, not by an update")
	}
	if len(r.Items) > 0 {
		var err error
		if msgs, err = ItemMessages("items", r.Items); err != nil {
			return nil, nil, err
		}
	}
	if !create && r.Metadata == nil {
		return nil, nil, field("metadata", "is required")
	}
	if err := checkMetadata(r.Metadata); err != nil {
		return nil, nil, err
	}
	if r.Metadata == nil {
		return nil, msgs, nil
	}
	b, err := json.Marshal(r.Metadata)
	if err != nil {
		return nil, nil, err
	}
	return b, msgs, runspec.StorableJSON("metadata", b)
}

// ItemsRequest is the body of POST /v1/conversations/{id}/items.
type ItemsRequest struct {
	Items []json.RawMessage `json:"items"`
}

// DecodeItems reads the body of POST /v1/conversations/{id}/items
// strictly: 1 to MaxConversationItems items, returned as the messages
// they add (see ItemMessages).
func DecodeItems(body []byte) ([]agentd.InputMessage, error) {
	var r ItemsRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if err := strict(body, &r); err != nil {
			return nil, decodeError(err)
		}
	}
	if len(r.Items) == 0 {
		return nil, field("items", "is required: 1 to %d items to add to the conversation", MaxConversationItems)
	}
	return ItemMessages("items", r.Items)
}

// ItemMessages reads the items a request adds to a conversation (name is
// their field, "items") as the messages agentd stores: at most
// MaxConversationItems, each a message (role user, assistant, system or
// developer, which is agentd's system; content a text or text parts, as a
// response's input takes them, not empty), or a function_call with its
// function_call_output after it. A call and its output travel together:
// an output that answers no call before it in the same request (the
// output of a call a response ended at belongs in the next response's
// input), a call left without its output, and a message between a call
// and its output are refused, so that the conversation stays valid for
// the model (each call followed by its output).
func ItemMessages(name string, raw []json.RawMessage) ([]agentd.InputMessage, error) {
	if len(raw) > MaxConversationItems {
		return nil, field(name, "must hold at most %d items, not %d", MaxConversationItems, len(raw))
	}
	msgs := make([]agentd.InputMessage, 0, len(raw))
	var open []string // the calls of the request not answered yet, in order
	for i, it := range raw {
		at := fmt.Sprintf("%s[%d]", name, i)
		var probe struct {
			Type *string `json:"type"`
		}
		if err := json.Unmarshal(it, &probe); err != nil {
			return nil, field(at, "must be an item (an object)")
		}
		typ := ""
		if probe.Type != nil {
			typ = *probe.Type
		}
		switch typ {
		case ItemFunctionCall:
			c, err := callItem(at, it)
			if err != nil {
				return nil, err
			}
			if err := storableCall(at, c); err != nil {
				return nil, err
			}
			if slices.Contains(open, c.ID) {
				return nil, field(at+".call_id", "%q is the call_id of another function_call that waits for its output", c.ID)
			}
			if len(open) > 0 && msgs[len(msgs)-1].Role != agentd.RoleAssistant {
				return nil, field(at, "comes before the output of function call %s: each call's output must follow it", open[0])
			}
			msgs = addCall(msgs, c)
			open = append(open, c.ID)
			continue
		case "item_reference":
			return nil, field(at+".type", "item_reference items cannot be added to a conversation: add the item itself")
		}
		m, err := inputItem(at, it)
		if err == nil {
			err = textOnly(at, m)
		}
		if err != nil {
			return nil, err
		}
		if m.Role == agentd.RoleTool {
			if !slices.Contains(open, m.ToolCallID) {
				return nil, field(at+".call_id", "%q answers no function_call before it in %s: a call and its output are added "+
					"together (the output of a call a response ended at goes in the input of the next response)", m.ToolCallID, name)
			}
			open = slices.DeleteFunc(open, func(id string) bool { return id == m.ToolCallID })
			if err := runspec.Storable(at+".call_id", m.ToolCallID); err != nil {
				return nil, err
			}
			if err := runspec.Storable(at+".output", m.Content); err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
			continue
		}
		if len(open) > 0 {
			return nil, field(at, "comes before the output of function call %s: each call's output must follow it", open[0])
		}
		if m.Content == "" {
			return nil, field(at+".content", "is required: a text that is not empty")
		}
		if err := runspec.Storable(at+".content", m.Content); err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	if len(open) > 0 {
		return nil, field(name, "has no function_call_output for call %s: each function_call needs its output after it", open[0])
	}
	return msgs, nil
}

// textOnly refuses an item (at) whose message holds images or files:
// they come in a response's input, which keeps them with its run.
func textOnly(at string, m agentd.InputMessage) error {
	for j, p := range m.Parts {
		if p.Attached() {
			return field(fmt.Sprintf("%s.content[%d].type", at, j), "images and files come in a response's input, "+
				"which keeps them with its run; a conversation's items hold text")
		}
	}
	return nil
}

// storableCall checks a function_call item's fields as agentd stores
// them: text it can keep, and arguments that are JSON.
func storableCall(at string, c agentd.InputCall) error {
	for _, f := range []struct{ name, v string }{{"call_id", c.ID}, {"name", c.Name}, {"arguments", c.Arguments}} {
		if err := runspec.Storable(at+"."+f.name, f.v); err != nil {
			return err
		}
	}
	if c.Arguments != "" && !json.Valid([]byte(c.Arguments)) {
		return field(at+".arguments", "must be JSON text")
	}
	return nil
}

// AddedItems is the answer of POST /v1/conversations/{id}/items: the
// items of msgs, the messages just added, in order.
func AddedItems(msgs []agentd.Message) List {
	items := ConversationItems(msgs)
	if items == nil {
		items = []Item{}
	}
	l := List{Object: "list", Data: items}
	if len(items) > 0 {
		l.FirstID, l.LastID = &items[0].ID, &items[len(items)-1].ID
	}
	return l
}

// ItemKeep says what deleting the conversation item itemID leaves of m,
// the message MessageOfItem names: nothing (nil: the message goes), or,
// for the text of an assistant message that also holds function calls,
// the calls. agentd.ErrNotFound: m has no such item. A function call and
// its output are not deleted (a *runspec.FieldError naming item_id): the
// model's API needs every call answered, and every output after its call.
func ItemKeep(itemID string) func(m agentd.Message) ([]agentd.Part, error) {
	return func(m agentd.Message) ([]agentd.Part, error) {
		items := ConversationItems([]agentd.Message{m})
		i := slices.IndexFunc(items, func(it Item) bool { return it.ID == itemID })
		if i < 0 {
			return nil, agentd.ErrNotFound
		}
		switch items[i].Type {
		case ItemFunctionCall, ItemFunctionCallOutput:
			return nil, field("item_id", "%s is a function call or its output, which stay together in the conversation "+
				"(the model's API needs each call answered): delete a message, or the conversation", itemID)
		}
		var calls []agentd.Part
		for _, p := range m.Content {
			if p.Type == agentd.PartToolCall {
				calls = append(calls, p)
			}
		}
		return calls, nil
	}
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
