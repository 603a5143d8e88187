// Package webhook delivers webhooks out: it turns the outbox rows that
// every run's stop writes into deliveries (persist.OutboxDispatch, whose
// transaction Payload reads the run through, for the body) and
// POSTs each, signed as the Standard Webhooks specification says (the
// webhook-id, webhook-timestamp and webhook-signature headers, through its
// Go library), retrying with exponential backoff and jitter up to a
// horizon. Every instance runs a Deliverer; they share the due deliveries
// through the database, so a delivery survives the death of the instance
// that was making it, and a slow endpoint holds a few of one instance's
// workers, never a run or another endpoint's deliveries.
//
// It imports the domain (agentd), internal/secrets and internal/metrics;
// internal/persist implements its Store.
package webhook
