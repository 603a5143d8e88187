package api

import (
	"context"
	"errors"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/responses"
	"github.com/agentd/agentd/internal/runspec"
)

// responseFork makes sr, a response request whose previous_response_id
// (run prev) is not the latest response of its conversation, a fork: its
// input is prev's conversation up to prev's end (tool results as
// recorded: nothing runs again), then its own; its conversation a new one.
// A client that regenerates a response, or sends one id for every step of
// a call, so branches the conversation instead of being refused.
func (s *server) responseFork(ctx context.Context, sr runspec.Request, prev string) (runspec.Request, *agentd.ForkRef, error) {
	run, err := s.store.RunGet(ctx, TenantFromContext(ctx), prev)
	if err != nil {
		return sr, nil, err
	}
	msgs, err := s.responseMessages(ctx, run)
	if err != nil {
		return sr, nil, err
	}
	files, err := s.forkFiles(ctx, msgs, s.compose.Defaults().MaxInputFilesBytes)
	if err != nil {
		return sr, nil, err
	}
	var history []agentd.InputMessage
	for _, m := range msgs {
		history = append(history, inputOf(m, files)...)
	}
	copied, own := len(history), sr.PartField
	sr.Input, sr.InputText = append(history, sr.Input...), false
	sr.PartField = func(i, j int) string {
		if i < copied {
			return "previous_response_id"
		}
		return own(i-copied, j)
	}
	return sr, &agentd.ForkRef{RunID: run.ID, Step: run.StepCount}, nil
}

// responseMessages are the completed messages of run's conversation up to
// the last of run's own.
func (s *server) responseMessages(ctx context.Context, run agentd.Run) ([]agentd.Message, error) {
	var out []agentd.Message
	last := 0 // how many of out end with run's last message so far
	err := s.completedMessages(ctx, run.ConversationID, 0, func(m agentd.Message) bool {
		out = append(out, m)
		if m.RunID == run.ID {
			last = len(out)
		}
		return true
	})
	return out[:last], err
}

// approvalConversation is the conversation of the approval requests a
// request's input sends back with the history its client keeps (the
// Agents SDK's, which names no previous response): that of the response
// that asked them, which must be its conversation's latest; "" when the
// input sends none back.
func (s *server) approvalConversation(ctx context.Context, tenant string, req responses.Request) (string, error) {
	ids := req.ResentApprovals()
	if len(ids) == 0 {
		return "", nil
	}
	run, err := s.store.RunOfToolCall(ctx, tenant, ids[0])
	if errors.Is(err, agentd.ErrRunNotFound) {
		return "", fieldError("input", "approval request %s is none of this tenant's responses'", responses.ApprovalRequestID(ids[0]))
	}
	if err != nil {
		return "", err
	}
	if run.Params.Unstored {
		return "", fieldError("input", "approval request %s is of a response that was not stored", responses.ApprovalRequestID(ids[0]))
	}
	return run.ConversationID, nil
}

// hostedTool is the server's tool that a hosted tool type stands for (the
// tools file's hosted_tools), when it is one of the server's now.
func (s *server) hostedTool(kind string) (string, bool) {
	name, ok := s.hosted[kind]
	if !ok || s.tools == nil {
		return "", false
	}
	_, ok = s.tools.Get(name)
	return name, ok
}
