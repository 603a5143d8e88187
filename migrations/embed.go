// Package migrations holds agentd's goose SQL migrations, embedded in the
// binary and applied at start-up by internal/persist.
//
// It imports nothing.
package migrations

import "embed"

// FS holds the migration files, named NNNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
