package persist

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// agentColumns read a version with its agent's head (v: agent_versions, a:
// agents).
const agentColumns = `v.tenant_id, v.name, v.version, v.description, v.definition, v.actor, v.created_at,
	a.latest_version, a.deleted_at`

func scanAgent(row pgx.Row) (agentd.Agent, error) {
	var a agentd.Agent
	err := row.Scan(&a.TenantID, &a.Name, &a.Version, &a.Description, &a.Definition, &a.Actor, &a.CreatedAt,
		&a.LatestVersion, &a.DeletedAt)
	return a, notFound(translate(err), agentd.ErrAgentNotFound)
}

// AgentCreate makes a tenant's agent, at version 1; a name whose agent was
// deleted is taken again, going on from its last version. check (nil:
// none) is called first, under the tenant's agents' lock (agentsLocked);
// its error is returned as it is, and nothing is written.
// ErrAgentExists: the tenant has an agent of that name.
func (s *Store) AgentCreate(ctx context.Context, in agentd.AgentDefine, check agentd.AgentCheck) (agentd.Agent, error) {
	var out agentd.Agent
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := agentsLocked(ctx, tx, in.TenantID, check); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `INSERT INTO agents AS a (tenant_id, name, latest_version) VALUES ($1, $2, 1)
			ON CONFLICT (tenant_id, name) DO UPDATE SET latest_version = a.latest_version + 1,
				updated_at = now(), deleted_at = NULL, deleted_by = NULL
			WHERE a.deleted_at IS NOT NULL
			RETURNING latest_version`, in.TenantID, in.Name).Scan(&version)
		if errors.Is(err, pgx.ErrNoRows) {
			return agentd.ErrAgentExists
		}
		if err != nil {
			return err
		}
		out, err = insertAgentVersion(ctx, tx, in, version)
		return err
	})
	return out, err
}

// AgentUpdate makes the next version of a tenant's agent; check is as
// AgentCreate's. ErrAgentNotFound: the tenant has no such agent.
func (s *Store) AgentUpdate(ctx context.Context, in agentd.AgentDefine, check agentd.AgentCheck) (agentd.Agent, error) {
	var out agentd.Agent
	err := s.tx(ctx, func(tx pgx.Tx) error {
		if err := agentsLocked(ctx, tx, in.TenantID, check); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `UPDATE agents SET latest_version = latest_version + 1, updated_at = now()
			WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL
			RETURNING latest_version`, in.TenantID, in.Name).Scan(&version)
		if err != nil {
			return notFound(translate(err), agentd.ErrAgentNotFound)
		}
		out, err = insertAgentVersion(ctx, tx, in, version)
		return err
	})
	return out, err
}

// agentsLocked takes, in tx, the lock of the tenant's agents' saves (a
// transaction lock on its id, which only saves take: runs read agents
// without it), and calls check with a reader of the agents in tx, which
// sees every save that committed before the lock was granted.
func agentsLocked(ctx context.Context, tx pgx.Tx, tenantID string, check agentd.AgentCheck) error {
	if check == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('agentd.agents:' || $1, 0))`, tenantID); err != nil {
		return fmt.Errorf("lock agents: %w", err)
	}
	return check(ctx, func(ctx context.Context, name string) (agentd.Agent, error) {
		return scanAgent(tx.QueryRow(ctx, `SELECT `+agentColumns+`
			FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.name = a.name AND v.version = a.latest_version
			WHERE a.tenant_id = $1 AND a.name = $2 AND a.deleted_at IS NULL`, tenantID, name))
	})
}

func insertAgentVersion(ctx context.Context, tx pgx.Tx, in agentd.AgentDefine, version int) (agentd.Agent, error) {
	return scanAgent(tx.QueryRow(ctx, `WITH v AS (
			INSERT INTO agent_versions (tenant_id, name, version, description, definition, actor)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING *)
		SELECT `+agentColumns+` FROM v, agents a WHERE a.tenant_id = v.tenant_id AND a.name = v.name`,
		in.TenantID, in.Name, version, in.Description, in.Definition, in.Actor))
}

// AgentGet returns version (0: the latest) of a tenant's agent that is not
// deleted. ErrAgentNotFound: no such agent; an *AgentVersionError: it has
// no such version.
func (s *Store) AgentGet(ctx context.Context, tenantID, name string, version int) (agentd.Agent, error) {
	a, err := scanAgent(s.pool.QueryRow(ctx, `SELECT `+agentColumns+`
		FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.name = a.name
			AND v.version = CASE WHEN $3 = 0 THEN a.latest_version ELSE $3 END
		WHERE a.tenant_id = $1 AND a.name = $2 AND a.deleted_at IS NULL`, tenantID, name, version))
	if errors.Is(err, agentd.ErrAgentNotFound) && version > 0 {
		if latest, lerr := s.AgentGet(ctx, tenantID, name, 0); lerr == nil {
			return a, &agentd.AgentVersionError{Name: name, Version: version, Latest: latest.Version}
		}
	}
	return a, err
}

// AgentList returns a page of a tenant's agents that are not deleted, at
// their latest versions, by name: limit of them after the name after.
func (s *Store) AgentList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Agent, error) {
	return queryAll(ctx, s.pool, scanAgent, `SELECT `+agentColumns+`
		FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.name = a.name AND v.version = a.latest_version
		WHERE a.tenant_id = $1 AND a.deleted_at IS NULL AND a.name > $2
		ORDER BY a.name LIMIT $3`, tenantID, after, limit)
}

// AgentVersions returns a page of the versions of a tenant's agent that is
// not deleted, newest first: limit of them before version before (0: from
// the latest). ErrAgentNotFound: no such agent.
func (s *Store) AgentVersions(ctx context.Context, tenantID, name string, before, limit int) ([]agentd.Agent, error) {
	out, err := queryAll(ctx, s.pool, scanAgent, `SELECT `+agentColumns+`
		FROM agents a JOIN agent_versions v ON v.tenant_id = a.tenant_id AND v.name = a.name
		WHERE a.tenant_id = $1 AND a.name = $2 AND a.deleted_at IS NULL AND ($3 = 0 OR v.version < $3)
		ORDER BY v.version DESC LIMIT $4`, tenantID, name, before, limit)
	if err == nil && len(out) == 0 {
		if _, err := s.AgentGet(ctx, tenantID, name, 0); err != nil {
			return nil, err
		}
	}
	return out, err
}

// AgentDelete deletes a tenant's agent: it is no longer found, and runs can
// no longer name it; its versions stay for the runs that ran them, which
// finish on them. ErrAgentNotFound: no such agent.
func (s *Store) AgentDelete(ctx context.Context, tenantID, name, actor string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE agents SET deleted_at = now(), deleted_by = $3, updated_at = now()
		WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL`, tenantID, name, actor)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() == 0 {
		return agentd.ErrAgentNotFound
	}
	return nil
}
