package responses

import (
	"encoding/json"
	"strconv"

	"github.com/agentd/agentd"
)

// customInput is the input of a call of a custom tool: the one argument
// the model called it with (customParameters), or the arguments whole
// when the model gave something else.
func customInput(arguments string) string {
	var args struct {
		Input *string `json:"input"`
	}
	if json.Unmarshal([]byte(arguments), &args) == nil && args.Input != nil {
		return *args.Input
	}
	return arguments
}

// customCall adds the output item of a call of a custom tool
// (custom_tool_call, its input a text), with its events.
func (b *Builder) customCall(p agentd.Part, index int, ns, name string) {
	id := prefixCustomToolCall + hexOf(b.run.ID) + "_" + strconv.Itoa(index)
	input := customInput(p.Arguments)
	b.event("response.output_item.added", map[string]any{"output_index": index,
		"item": Item{ID: id, Type: ItemCustomToolCall, Status: StatusInProgress, CallID: p.ID, Name: name, Namespace: ns, Input: ptr("")}})
	b.event("response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": index, "delta": input})
	b.event("response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": index, "input": input})
	item := Item{ID: id, Type: ItemCustomToolCall, Status: StatusCompleted, CallID: p.ID, Name: name, Namespace: ns, Input: ptr(input)}
	b.resp.Output = append(b.resp.Output, item)
	b.event("response.output_item.done", map[string]any{"output_index": index, "item": item})
}

// customCallItem reads a custom_tool_call item a client sends back with
// its history: the call as the model made it, its input the argument.
func customCallItem(name string, raw json.RawMessage) (agentd.InputCall, error) {
	var it struct {
		Type      string  `json:"type"`
		ID        *string `json:"id"`
		CallID    *string `json:"call_id"`
		Name      *string `json:"name"`
		Input     *string `json:"input"`
		Status    *string `json:"status"`
		Namespace *string `json:"namespace"`
	}
	if err := strict(raw, &it); err != nil {
		return agentd.InputCall{}, decodeItemError(name, err)
	}
	if it.CallID == nil || *it.CallID == "" || it.Name == nil || *it.Name == "" {
		return agentd.InputCall{}, field(name, "a custom_tool_call needs its call_id and name")
	}
	c := agentd.InputCall{ID: *it.CallID, Name: *it.Name}
	if it.Namespace != nil && *it.Namespace != "" {
		c.Name = *it.Namespace + NamespaceSep + *it.Name
	}
	input := ""
	if it.Input != nil {
		input = *it.Input
	}
	args, _ := json.Marshal(map[string]string{"input": input}) // never fails
	c.Arguments = string(args)
	return c, nil
}
