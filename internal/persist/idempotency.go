package persist

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// IdempotencyStale is how long a key may stay claimed without a response
// before a request with it claims it again: the request that claimed it
// could not store its answer nor free the key (the database went away
// between the two, or its process died). Every request that takes a key
// answers well within it.
const IdempotencyStale = time.Minute

// IdempotencyBegin claims key for a request with fingerprint hash. fresh is
// true when the key was unused, or claimed longer than IdempotencyStale ago
// by a request that left no response: the caller runs the request, then
// calls IdempotencyFinish (or IdempotencyAbandon). Otherwise rec is what
// the key holds (its response, or Done false while the first request is in
// flight).
func (s *Store) IdempotencyBegin(ctx context.Context, tenantID, key, hash string) (rec agentd.IdempotencyRecord, fresh bool, err error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, request_hash) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id, key) DO UPDATE SET request_hash = EXCLUDED.request_hash, created_at = now()
		WHERE idempotency_keys.status IS NULL AND idempotency_keys.created_at < now() - $4::interval`,
		tenantID, key, hash, IdempotencyStale)
	if err != nil {
		return rec, false, translate(err)
	}
	if tag.RowsAffected() == 1 {
		return agentd.IdempotencyRecord{RequestHash: hash}, true, nil
	}
	var status *int32
	var ct *string
	err = s.pool.QueryRow(ctx, `SELECT request_hash, status, content_type, response FROM idempotency_keys
		WHERE tenant_id = $1 AND key = $2`, tenantID, key).Scan(&rec.RequestHash, &status, &ct, &rec.Response)
	if errors.Is(err, pgx.ErrNoRows) {
		// Abandoned between the two statements: the caller may try again.
		return rec, false, agentd.ErrConflict
	}
	if err != nil {
		return rec, false, translate(err)
	}
	if status != nil {
		rec.Done, rec.Status = true, int(*status)
	}
	if ct != nil {
		rec.ContentType = *ct
	}
	return rec, false, nil
}

// IdempotencyFinish stores the response of the request that claimed the key.
func (s *Store) IdempotencyFinish(ctx context.Context, r agentd.IdempotencyResponse) error {
	_, err := s.pool.Exec(ctx, `UPDATE idempotency_keys SET status = $3, content_type = $4, response = $5
		WHERE tenant_id = $1 AND key = $2`, r.TenantID, r.Key, r.Status, r.ContentType, r.Body)
	return translate(err)
}

// IdempotencyAbandon frees key after its request failed in a way worth
// retrying (a server error), so that a retry runs the request again.
func (s *Store) IdempotencyAbandon(ctx context.Context, tenantID, key string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND status IS NULL`, tenantID, key)
	return translate(err)
}
