package persist

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// instructionsColumns are what an instructions read scans (scanInstructions).
const instructionsColumns = `tenant_id, version, coalesce(text, ''), coalesce(updated_by, ''), updated_at`

// InstructionsGet returns tenant's managed instructions: Text "" (and
// Version 0 when they were never set) for none.
func (s *Store) InstructionsGet(ctx context.Context, tenant string) (agentd.ManagedInstructions, error) {
	m, err := scanInstructions(s.pool.QueryRow(ctx, `SELECT `+instructionsColumns+` FROM tenant_instructions WHERE tenant_id = $1`, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return agentd.ManagedInstructions{TenantID: tenant}, nil
	}
	if err != nil {
		return m, fmt.Errorf("get instructions: %w", translate(err))
	}
	return m, nil
}

// InstructionsPut sets tenant's managed instructions to text, at their
// next version; actor is who set them. The next run of the tenant, on any
// instance, is given them.
func (s *Store) InstructionsPut(ctx context.Context, tenant, text, actor string) (agentd.ManagedInstructions, error) {
	if text == "" {
		return agentd.ManagedInstructions{}, fmt.Errorf("empty instructions: %w", ErrInvalidValue)
	}
	m, err := scanInstructions(s.pool.QueryRow(ctx, `INSERT INTO tenant_instructions AS t (tenant_id, version, text, updated_by)
		VALUES ($1, 1, $2, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET version = t.version + 1, text = excluded.text,
			updated_by = excluded.updated_by, updated_at = now()
		RETURNING `+instructionsColumns, tenant, text, nullIfEmpty(actor)))
	if err != nil {
		return m, fmt.Errorf("put instructions: %w", translate(err))
	}
	return m, nil
}

// InstructionsDelete removes tenant's managed instructions, at their next
// version (nothing when it has none); actor is who removed them. Later
// runs of the tenant are given none.
func (s *Store) InstructionsDelete(ctx context.Context, tenant, actor string) error {
	_, err := s.pool.Exec(ctx, `UPDATE tenant_instructions SET version = version + 1, text = NULL, updated_by = $2,
		updated_at = now() WHERE tenant_id = $1 AND text IS NOT NULL`, tenant, nullIfEmpty(actor))
	if err != nil {
		return fmt.Errorf("delete instructions: %w", translate(err))
	}
	return nil
}

func scanInstructions(row pgx.Row) (agentd.ManagedInstructions, error) {
	var m agentd.ManagedInstructions
	err := row.Scan(&m.TenantID, &m.Version, &m.Text, &m.UpdatedBy, &m.UpdatedAt)
	return m, err
}
