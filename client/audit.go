package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
)

// ErrAuditCut is the error RunAudit ends with when the export stops before
// its last line (kind "end"): the connection broke, or the server failed
// while it wrote.
var ErrAuditCut = errors.New("agentd: the audit export was cut before its end")

// maxAuditLine is the longest line RunAudit reads (a line carries a call's
// arguments or a required action, each bounded by what agentd stores).
const maxAuditLine = 16 << 20

// RunAudit reads a run's audit export (GET /runs/{id}/audit) as it comes:
// one JSON object per line, in the order of the run's log, each an
// AuditLine of openapi.yaml (its "kind" says which). The last line a whole
// export yields is of kind "end"; one that stops before it ends with
// ErrAuditCut. It yields an error and stops when the server refuses the
// export (an *Error, such as run_not_found), when ctx ends, or when the
// caller stops ranging.
func (c *Client) RunAudit(ctx context.Context, runID string) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		resp, err := c.send(ctx, request{method: http.MethodGet, path: "/runs/" + esc(runID) + "/audit", accept: "application/x-ndjson"})
		if err != nil {
			yield(nil, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), maxAuditLine)
		ended := false
		for sc.Scan() {
			var l struct {
				Kind string `json:"kind"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				yield(nil, fmt.Errorf("agentd: read the audit of %s: %w", runID, err))
				return
			}
			ended = l.Kind == "end"
			if !yield(json.RawMessage(bytes.Clone(sc.Bytes())), nil) {
				return
			}
		}
		switch {
		case ctx.Err() != nil:
			yield(nil, ctx.Err())
		case sc.Err() != nil:
			yield(nil, fmt.Errorf("%w: %w", ErrAuditCut, sc.Err()))
		case !ended:
			yield(nil, ErrAuditCut)
		}
	}
}
