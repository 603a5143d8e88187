package persist

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd"
)

// datasetColumns read a version of a dataset with its head (d: datasets,
// v: dataset_versions).
const datasetColumns = `d.tenant_id, d.name, d.description, d.metadata, v.version, v.change, v.changed_cases,
	v.case_count, v.actor, v.created_at, d.latest_version`

func scanDataset(row pgx.Row) (agentd.Dataset, error) {
	var d agentd.Dataset
	err := row.Scan(&d.TenantID, &d.Name, &d.Description, &d.Metadata, &d.Version, &d.Change, &d.ChangedCases,
		&d.CaseCount, &d.Actor, &d.CreatedAt, &d.LatestVersion)
	return d, notFound(translate(err), agentd.ErrDatasetNotFound)
}

// DatasetCreate makes a tenant's dataset with its cases, at version 1; a
// name whose dataset was deleted is taken again, going on from its last
// version. ErrDatasetExists: the tenant has a dataset of that name.
func (s *Store) DatasetCreate(ctx context.Context, in agentd.DatasetDefine) (agentd.Dataset, error) {
	var out agentd.Dataset
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var version, first int
		n := len(in.Cases)
		var meta any // SQL NULL for none
		if len(in.Metadata) > 0 {
			meta = in.Metadata
		}
		err := tx.QueryRow(ctx, `INSERT INTO datasets AS d (tenant_id, name, description, metadata, latest_version, next_seq)
			VALUES ($1, $2, $3, $4, 1, 1 + $5)
			ON CONFLICT (tenant_id, name) DO UPDATE SET latest_version = d.latest_version + 1, next_seq = d.next_seq + $5,
				description = $3, metadata = $4, created_at = now(), updated_at = now(), deleted_at = NULL, deleted_by = NULL
			WHERE d.deleted_at IS NOT NULL
			RETURNING latest_version, next_seq - $5`, in.TenantID, in.Name, in.Description, meta, n).Scan(&version, &first)
		if errors.Is(err, pgx.ErrNoRows) {
			return agentd.ErrDatasetExists
		}
		if err != nil {
			return err
		}
		ids, err := insertCases(ctx, tx, in.TenantID, in.Name, in.Actor, version, first, in.Cases)
		if err != nil {
			return err
		}
		out, err = insertDatasetVersion(ctx, tx, in.TenantID, in.Name, in.Actor, version, agentd.DatasetCreated, ids, n)
		return err
	})
	return out, err
}

// DatasetCasesAdd adds cases to a tenant's dataset, in its next version.
// ErrDatasetNotFound: no such dataset; a *CaseExistsError: a case's id
// names a case of its latest version; a *DatasetLimitError: the version
// would hold more than p.MaxCases.
func (s *Store) DatasetCasesAdd(ctx context.Context, p agentd.CasesAdd) (agentd.Dataset, error) {
	var out agentd.Dataset
	err := s.tx(ctx, func(tx pgx.Tx) error {
		n := len(p.Cases)
		var version, first int
		err := tx.QueryRow(ctx, `UPDATE datasets SET latest_version = latest_version + 1, next_seq = next_seq + $3, updated_at = now()
			WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL
			RETURNING latest_version, next_seq - $3`, p.TenantID, p.Name, n).Scan(&version, &first)
		if err != nil {
			return notFound(translate(err), agentd.ErrDatasetNotFound)
		}
		live, err := liveCases(ctx, tx, p.TenantID, p.Name)
		if err != nil {
			return err
		}
		if p.MaxCases > 0 && live+n > p.MaxCases {
			return &agentd.DatasetLimitError{Limit: agentd.LimitCasesPerDataset, Max: int64(p.MaxCases), Would: int64(live + n)}
		}
		ids := make([]string, n)
		for i, c := range p.Cases {
			ids[i] = c.ID
		}
		var taken string
		err = tx.QueryRow(ctx, `SELECT case_id FROM dataset_cases
			WHERE tenant_id = $1 AND dataset = $2 AND removed_in IS NULL AND case_id = ANY($3) ORDER BY seq LIMIT 1`,
			p.TenantID, p.Name, ids).Scan(&taken)
		switch {
		case err == nil:
			return &agentd.CaseExistsError{ID: taken}
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if _, err := insertCases(ctx, tx, p.TenantID, p.Name, p.Actor, version, first, p.Cases); err != nil {
			return err
		}
		out, err = insertDatasetVersion(ctx, tx, p.TenantID, p.Name, p.Actor, version, agentd.DatasetCasesAdded, ids, live+n)
		return err
	})
	return out, err
}

// DatasetCaseRemove removes a case from a tenant's dataset, in its next
// version (the versions before keep it). ErrDatasetNotFound: no such
// dataset; ErrCaseNotFound: its latest version has no such case.
func (s *Store) DatasetCaseRemove(ctx context.Context, tenantID, name, caseID, actor string) (agentd.Dataset, error) {
	var out agentd.Dataset
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var version int
		err := tx.QueryRow(ctx, `UPDATE datasets SET latest_version = latest_version + 1, updated_at = now()
			WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL
			RETURNING latest_version`, tenantID, name).Scan(&version)
		if err != nil {
			return notFound(translate(err), agentd.ErrDatasetNotFound)
		}
		tag, err := tx.Exec(ctx, `UPDATE dataset_cases SET removed_in = $4
			WHERE tenant_id = $1 AND dataset = $2 AND case_id = $3 AND removed_in IS NULL`, tenantID, name, caseID, version)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return agentd.ErrCaseNotFound
		}
		live, err := liveCases(ctx, tx, tenantID, name)
		if err != nil {
			return err
		}
		out, err = insertDatasetVersion(ctx, tx, tenantID, name, actor, version, agentd.DatasetCaseRemoved, []string{caseID}, live)
		return err
	})
	return out, err
}

// liveCases counts the cases of a dataset's latest version, in tx.
func liveCases(ctx context.Context, tx pgx.Tx, tenantID, name string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM dataset_cases WHERE tenant_id = $1 AND dataset = $2 AND removed_in IS NULL`,
		tenantID, name).Scan(&n)
	return n, err
}

// insertCases stores cases as added by version, at the places from first
// on, and returns their ids.
func insertCases(ctx context.Context, tx pgx.Tx, tenantID, name, actor string, version, first int,
	cases []agentd.DatasetCase) ([]string, error) {
	ids := make([]string, len(cases))
	kinds := make([]string, len(cases))
	bodies := make([]string, len(cases))
	sizes := make([]int32, len(cases))
	for i, c := range cases {
		b, err := json.Marshal(c)
		if err != nil {
			return nil, fmt.Errorf("encode case %s: %w", c.ID, err)
		}
		ids[i], kinds[i], bodies[i], sizes[i] = c.ID, string(c.Kind()), string(b), int32(len(b))
	}
	if len(cases) == 0 {
		return ids, nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO dataset_cases (tenant_id, dataset, seq, case_id, kind, added_in, body, bytes, actor)
		SELECT $1, $2, $3 + c.n - 1, c.id, c.kind, $4, c.body::jsonb, c.bytes, $5
		FROM unnest($6::text[], $7::text[], $8::text[], $9::int[]) WITH ORDINALITY AS c (id, kind, body, bytes, n)`,
		tenantID, name, first, version, actor, ids, kinds, bodies, sizes)
	return ids, err
}

func insertDatasetVersion(ctx context.Context, tx pgx.Tx, tenantID, name, actor string, version int,
	change agentd.DatasetChange, changed []string, count int) (agentd.Dataset, error) {
	if changed == nil {
		changed = []string{}
	}
	return scanDataset(tx.QueryRow(ctx, `WITH v AS (
			INSERT INTO dataset_versions (tenant_id, name, version, change, changed_cases, case_count, actor)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *)
		SELECT `+datasetColumns+` FROM v, datasets d WHERE d.tenant_id = v.tenant_id AND d.name = v.name`,
		tenantID, name, version, change, changed, count, actor))
}

// DatasetGet returns version (0: the latest) of a tenant's dataset that is
// not deleted. ErrDatasetNotFound: no such dataset; a
// *DatasetVersionError: it has no such version.
func (s *Store) DatasetGet(ctx context.Context, tenantID, name string, version int) (agentd.Dataset, error) {
	d, err := scanDataset(s.pool.QueryRow(ctx, `SELECT `+datasetColumns+`
		FROM datasets d JOIN dataset_versions v ON v.tenant_id = d.tenant_id AND v.name = d.name
			AND v.version = CASE WHEN $3 = 0 THEN d.latest_version ELSE $3 END
		WHERE d.tenant_id = $1 AND d.name = $2 AND d.deleted_at IS NULL`, tenantID, name, version))
	if errors.Is(err, agentd.ErrDatasetNotFound) && version > 0 {
		if latest, lerr := s.DatasetGet(ctx, tenantID, name, 0); lerr == nil {
			return d, &agentd.DatasetVersionError{Name: name, Version: version, Latest: latest.Version}
		}
	}
	return d, err
}

// DatasetList returns a page of a tenant's datasets that are not deleted,
// at their latest versions, by name: limit of them after the name after.
func (s *Store) DatasetList(ctx context.Context, tenantID, after string, limit int) ([]agentd.Dataset, error) {
	return queryAll(ctx, s.pool, scanDataset, `SELECT `+datasetColumns+`
		FROM datasets d JOIN dataset_versions v ON v.tenant_id = d.tenant_id AND v.name = d.name AND v.version = d.latest_version
		WHERE d.tenant_id = $1 AND d.deleted_at IS NULL AND d.name > $2
		ORDER BY d.name LIMIT $3`, tenantID, after, limit)
}

func scanCase(row pgx.Row) (agentd.StoredCase, error) {
	var c agentd.StoredCase
	var body []byte
	if err := row.Scan(&c.Seq, &c.AddedIn, &body, &c.Bytes, &c.Actor, &c.CreatedAt); err != nil {
		return c, translate(err)
	}
	if err := json.Unmarshal(body, &c.Case); err != nil {
		return c, fmt.Errorf("decode case %d: %w", c.Seq, err)
	}
	return c, nil
}

// DatasetCases returns a page of the cases of version (0: the latest) of a
// tenant's dataset, in the order they were added: limit of them after
// place after (StoredCase.Seq). Its errors are DatasetGet's.
func (s *Store) DatasetCases(ctx context.Context, tenantID, name string, version, after, limit int) ([]agentd.StoredCase, error) {
	d, err := s.DatasetGet(ctx, tenantID, name, version)
	if err != nil {
		return nil, err
	}
	return queryAll(ctx, s.pool, scanCase, `SELECT seq, added_in, body, bytes, actor, created_at FROM dataset_cases
		WHERE tenant_id = $1 AND dataset = $2 AND added_in <= $3 AND (removed_in IS NULL OR removed_in > $3) AND seq > $4
		ORDER BY seq LIMIT $5`, tenantID, name, d.Version, after, limit)
}

// DatasetDelete deletes a tenant's dataset: its versions and cases are
// removed (a case may hold a copy of a production conversation); its name
// taken again goes on from its last version. ErrDatasetNotFound: no such
// dataset.
func (s *Store) DatasetDelete(ctx context.Context, tenantID, name, actor string) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE datasets SET deleted_at = now(), deleted_by = $3, updated_at = now()
			WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL`, tenantID, name, actor)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return agentd.ErrDatasetNotFound
		}
		if _, err := tx.Exec(ctx, `DELETE FROM dataset_cases WHERE tenant_id = $1 AND dataset = $2`, tenantID, name); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM dataset_versions WHERE tenant_id = $1 AND name = $2`, tenantID, name)
		return err
	})
}
