// Package secrets seals the secrets agentd keeps for its tenants (the
// headers of their webhook tools) under a server key, with AES-256-GCM:
// what the database holds is never the secret, and a sealed value is bound
// to what it belongs to (its associated data), so that it cannot be moved
// to another tenant's row and opened there.
//
// It imports nothing of agentd's.
package secrets
