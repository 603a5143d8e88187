package persist

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

const keyColumns = `prefix, tenant_id, name, scopes, secret_hash, created_at, last_used_at, revoked_at`

func scanKey(row pgx.Row) (agentd.APIKey, error) {
	var k agentd.APIKey
	err := row.Scan(&k.Prefix, &k.TenantID, &k.Name, &k.Scopes, &k.SecretHash, &k.CreatedAt, &k.LastUsedAt, &k.RevokedAt)
	return k, translate(err)
}

// KeyInsert stores a new key. ErrConflict: its prefix is taken.
func (s *Store) KeyInsert(ctx context.Context, k agentd.APIKey) (agentd.APIKey, error) {
	return scanKey(s.pool.QueryRow(ctx, `INSERT INTO api_keys (prefix, tenant_id, name, scopes, secret_hash)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+keyColumns, k.Prefix, k.TenantID, k.Name, k.Scopes, k.SecretHash))
}

// KeyGet returns the key of prefix, revoked or not, or ErrNotFound.
func (s *Store) KeyGet(ctx context.Context, prefix string) (agentd.APIKey, error) {
	return scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE prefix = $1`, prefix))
}

// KeyList returns the keys of a tenant (every tenant's when tenantID is
// empty), oldest first.
func (s *Store) KeyList(ctx context.Context, tenantID string) ([]agentd.APIKey, error) {
	return queryAll(ctx, s.pool, scanKey, `SELECT `+keyColumns+` FROM api_keys
		WHERE $1 = '' OR tenant_id = $1 ORDER BY created_at, prefix`, tenantID)
}

// KeyRevoke revokes the key of prefix and returns it; revoking it again
// keeps its first revocation time. ErrNotFound: no such key.
func (s *Store) KeyRevoke(ctx context.Context, prefix string) (agentd.APIKey, error) {
	return scanKey(s.pool.QueryRow(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
		WHERE prefix = $1 RETURNING `+keyColumns, prefix))
}

// KeyTouch records that the key of prefix was used at.
func (s *Store) KeyTouch(ctx context.Context, prefix string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $2
		WHERE prefix = $1 AND (last_used_at IS NULL OR last_used_at < $2)`, prefix, at)
	return translate(err)
}
