package persist

import (
	"encoding/json"

	"github.com/agentd/agentd"
)

// RunEnd sets a run's status as the executor leaves it: a terminal status,
// interrupted, or requires_action. The lease is released with it.
type RunEnd struct {
	ID             string
	Status         agentd.RunStatus
	Reason         agentd.Reason
	Error          *agentd.ErrorDetail
	RequiredAction *agentd.RequiredAction // with requires_action
	Output         []agentd.Part          // with completed: the final assistant message's parts
}

func (o RunEnd) queue(b *batch) error {
	errJSON, err := jsonOrNull(o.Error)
	if err != nil {
		return err
	}
	action, err := jsonOrNull(o.RequiredAction)
	if err != nil {
		return err
	}
	var output []byte
	if o.Output != nil {
		if output, err = json.Marshal(o.Output); err != nil {
			return err
		}
	}
	b.exec("end run", `UPDATE runs SET status = $2, terminal_reason = nullif($3, ''), error = $4, required_action = $5,
		lease_owner = NULL, lease_expires_at = NULL, interrupt_requested_at = NULL, stall_claims = 0,
		finished_at = CASE WHEN $6 THEN now() END, output = $7
		WHERE id = $1`, o.ID, o.Status, o.Reason, errJSON, action, o.Status.Stopped(), output)
	if o.Status == agentd.StatusCancelled || o.Status == agentd.StatusInterrupted {
		b.exec("abort unanswered input", abortUnanswered, o.ID)
	}
	if o.Status == agentd.StatusRequiresAction {
		b.exec("pause the total timeout", pauseBudget, o.ID)
	}
	return nil
}
