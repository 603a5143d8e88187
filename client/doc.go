// Package client is the Go client of agentd's HTTP API: typed requests and
// responses for every route, errors as *Error with the problem+json fields,
// an Idempotency-Key on every POST (the same on each retry, so that a
// retried call never starts a second run), and a run's events as an
// iterator that reconnects with Last-Event-ID until the run's end.
//
// Its types are agentd's domain types (package agentd, the module's root):
// the views the server builds its answers from, the typed statuses,
// reasons and event types with their constants, and each event's payload,
// which Event.Payload decodes. It imports nothing else of agentd's but its
// own SSE reader (client/sse).
//
//	c := client.New("http://localhost:8080", client.WithAPIKey(os.Getenv("AGENTD_API_KEY")))
//	run, err := c.CreateRun(ctx, client.CreateRun{Input: "What is 6*7?"})
//	for ev, err := range c.Events(ctx, run.ID, 0) { ... }
package client
