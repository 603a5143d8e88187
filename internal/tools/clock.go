package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
	_ "time/tzdata" // zone names work on hosts without a zoneinfo database

	"github.com/agentd/agentd"
)

// Clock returns the read_only tool "clock", which tells the current time in
// an IANA time zone (default UTC): {"now": RFC 3339 with nanoseconds,
// "unix": seconds, "timezone": name}. An unknown zone is a KindFinal error.
func Clock() Tool { return clock{now: time.Now} }

type clock struct{ now func() time.Time }

var clockSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "timezone": {
      "type": "string",
      "description": "IANA time zone name such as Europe/Paris or America/New_York; default UTC."
    }
  },
  "additionalProperties": false
}`)

func (clock) Spec() Spec {
	return Spec{
		Name:        "clock",
		Description: "Get the current date and time, optionally in a given IANA time zone.",
		Parameters:  clockSchema,
		Effect:      agentd.EffectReadOnly,
	}
}

func (c clock) Invoke(ctx context.Context, call Call) (json.RawMessage, error) {
	var args struct {
		Timezone string `json:"timezone"`
	}
	if len(call.Arguments) > 0 {
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return nil, &Error{Kind: KindFinal, Message: "arguments must be an object with an optional string \"timezone\"", Err: err}
		}
	}
	name := args.Timezone
	if name == "" {
		name = "UTC"
	}
	if name == "Local" {
		return nil, &Error{Kind: KindFinal, Message: `unknown time zone "Local": use an IANA name such as Europe/Paris`}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, &Error{Kind: KindFinal, Message: fmt.Sprintf("unknown time zone %q: use an IANA name such as Europe/Paris", name), Err: err}
	}
	now := c.now().In(loc)
	return json.Marshal(struct {
		Now      string `json:"now"`
		Unix     int64  `json:"unix"`
		Timezone string `json:"timezone"`
	}{now.Format(time.RFC3339Nano), now.Unix(), loc.String()})
}
