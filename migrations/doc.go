// Package migrations holds agentd's goose SQL migrations, embedded in the
// binary and applied at start-up by internal/persist.
//
// It imports nothing.
package migrations
