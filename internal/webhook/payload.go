package webhook

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agentd/agentd"
)

var _ agentd.PayloadFunc = Payload

// Payload is the body of the deliveries of outbox row e (an
// agentd.PayloadFunc): {"type", "timestamp", "data": {"run": <the run as
// GET /runs/{id} shows it, its cost included>}}, read through runs. ok
// false: the run is gone (it was not to be stored), and there is nothing
// to deliver.
func Payload(ctx context.Context, runs agentd.RunReader, e agentd.OutboxEntry) (json.RawMessage, bool, error) {
	run, err := runs.RunGet(ctx, e.TenantID, e.RunID)
	if errors.Is(err, agentd.ErrRunNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	costs, err := runs.RunCosts(ctx, []string{run.ID})
	if err != nil {
		return nil, false, err
	}
	v := run.View()
	v.Cost, v.Usage.CacheWriteTokens = costs[run.ID].Cost, costs[run.ID].CacheWriteTokens
	b, err := agentd.DeliveryPayload(e.EventType, e.CreatedAt, map[string]any{"run": v})
	return b, err == nil, err
}
