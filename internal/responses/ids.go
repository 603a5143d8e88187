package responses

import (
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Prefixes of the ids of the Responses API.
const (
	prefixResponse     = "resp_"
	prefixConversation = "conv_"
	prefixMessage      = "msg_"
	prefixFunctionCall = "fc_"
	// prefixFunctionCallOutput is that of a function call's output, as an
	// input item.
	prefixFunctionCallOutput = "fco_"
	prefixMCPCall            = "mcp_"
	prefixApprovalRequest    = "mcpr_"
	prefixApprovalResponse   = "mcpa_"
	prefixReasoning          = "rs_"
	prefixCustomToolCall     = "ctc_"
)

// ApprovalRequestID is the id of the mcp_approval_request item of the
// tool call toolCallID, which waits for an approval.
func ApprovalRequestID(toolCallID string) string { return prefixApprovalRequest + hexOf(toolCallID) }

// ApprovalCallOf returns the tool call id of an approval request id
// (false: not one).
func ApprovalCallOf(id string) (string, bool) { return idOf(id, prefixApprovalRequest) }

// ResponseID is the id of the response that run runID is.
func ResponseID(runID string) string { return prefixResponse + hexOf(runID) }

// RunID returns the run id of a response id (false: not one).
func RunID(responseID string) (string, bool) { return idOf(responseID, prefixResponse) }

// ConversationID is the Responses API's id of agentd's conversation id.
func ConversationID(id string) string { return prefixConversation + hexOf(id) }

// ConversationOf returns agentd's conversation id of a conv_ id (false:
// not one).
func ConversationOf(id string) (string, bool) { return idOf(id, prefixConversation) }

// messageItemID is the id of the n-th output item of run runID (a message):
// fixed when the item starts streaming, before its message is stored.
func messageItemID(runID string, n int) string {
	return prefixMessage + hexOf(runID) + "_" + strconv.Itoa(n)
}

// functionCallItemID is the id of the n-th output item of run runID, a
// function call.
func functionCallItemID(runID string, n int) string {
	return prefixFunctionCall + hexOf(runID) + "_" + strconv.Itoa(n)
}

// mcpCallItemID is the id of the n-th output item of run runID, a call of
// one of the operator's tools.
func mcpCallItemID(runID string, n int) string {
	return prefixMCPCall + hexOf(runID) + "_" + strconv.Itoa(n)
}

// hexOf is a UUID's 32 hex digits.
func hexOf(id string) string { return strings.ReplaceAll(id, "-", "") }

func idOf(id, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != 32 {
		return "", false
	}
	u, err := uuid.Parse(rest)
	if err != nil {
		return "", false
	}
	return u.String(), true
}
