-- +goose Up
-- A tenant's datasets: named, versioned sets of cases that evaluations run
-- agents on (docs/evals.md). A dataset's row is its head: its latest
-- version, the next place of a case, and when it was deleted. Each change
-- of its cases is a version (dataset_versions: what changed, who made it);
-- a case is an immutable row that the version added_in added and the
-- version removed_in removed (NULL: it is in the latest), so that version
-- N holds the cases with added_in <= N and no removed_in <= N, and an
-- evaluation that names a version reads the same cases forever.
--
-- A deleted dataset keeps its head, so that its name taken again goes on
-- from its last version (a version number never names two contents), but
-- not its cases: they may hold copies of production conversations.
CREATE TABLE datasets (
    tenant_id      text        NOT NULL,
    name           text        NOT NULL,
    description    text        NOT NULL DEFAULT '',
    metadata       jsonb,
    latest_version integer     NOT NULL,
    next_seq       integer     NOT NULL DEFAULT 1,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    deleted_at     timestamptz,
    deleted_by     text,
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE dataset_versions (
    tenant_id     text        NOT NULL,
    name          text        NOT NULL,
    version       integer     NOT NULL,
    change        text        NOT NULL CHECK (change IN ('created', 'cases_added', 'case_removed')),
    changed_cases text[]      NOT NULL DEFAULT '{}',
    case_count    integer     NOT NULL,
    actor         text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name, version),
    FOREIGN KEY (tenant_id, name) REFERENCES datasets (tenant_id, name) ON DELETE CASCADE
);

CREATE TABLE dataset_cases (
    tenant_id  text        NOT NULL,
    dataset    text        NOT NULL,
    seq        integer     NOT NULL,
    case_id    text        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('input', 'from_run')),
    added_in   integer     NOT NULL,
    removed_in integer,
    body       jsonb       NOT NULL,
    bytes      integer     NOT NULL,
    actor      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, dataset, seq),
    FOREIGN KEY (tenant_id, dataset) REFERENCES datasets (tenant_id, name) ON DELETE CASCADE
);
-- A case id names one case of the latest version.
CREATE UNIQUE INDEX dataset_cases_live_id ON dataset_cases (tenant_id, dataset, case_id) WHERE removed_in IS NULL;

-- +goose Down
DROP TABLE dataset_cases;
DROP TABLE dataset_versions;
DROP TABLE datasets;
