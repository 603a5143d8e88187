-- +goose Up
-- Memory: items a tenant's clients and agents keep across conversations
-- (docs/memory.md). An item lives at a namespace (a path of segments,
-- stored in its path form: segments joined with '/', which no segment
-- holds, so that a prefix is a range of a "C"-collated btree) under a key.
--
-- Every write is an immutable row of memory_versions: an update adds a
-- version, a delete a tombstone (deleted, value ''); a read as of a time
-- takes the latest version written by then. memory_items holds each
-- item's current version (tombstones too, so that the next write finds
-- its version and its row lock there), and what lists and searches read:
-- they touch only live rows, through partial indexes. A purge removes both
-- and writes only counts to memory_purges.
--
-- overlay (NULL: real memory) is a fork's or an evaluation's own memory:
-- its reads take real memory as of the fork's point with the overlay's
-- versions over it, and its writes go to the overlay alone (invariant 15).
CREATE TABLE memory_versions (
    tenant_id text NOT NULL,
    overlay uuid,
    namespace text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    version int NOT NULL,
    value text NOT NULL,
    data jsonb,
    deleted boolean NOT NULL DEFAULT false,
    source text NOT NULL CHECK (source IN ('api', 'agent', 'extraction')),
    actor text,
    run_id uuid,
    step int,
    tool_call_id text,
    extracted_from uuid,
    embedding real[],
    embedding_model text,
    bytes int NOT NULL,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- An item's versions, in order; also the as-of reads' and the purge's
-- path (a namespace prefix is a range of it).
CREATE UNIQUE INDEX memory_versions_key ON memory_versions (tenant_id, namespace, key, overlay, version)
    NULLS NOT DISTINCT;

CREATE TABLE memory_items (
    tenant_id text NOT NULL,
    overlay uuid,
    namespace text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    version int NOT NULL,
    value text NOT NULL,
    data jsonb,
    deleted boolean NOT NULL DEFAULT false,
    source text NOT NULL CHECK (source IN ('api', 'agent', 'extraction')),
    actor text,
    run_id uuid,
    step int,
    tool_call_id text,
    extracted_from uuid,
    embedding real[],
    embedding_model text,
    bytes int NOT NULL,
    expires_at timestamptz,
    -- created_at: the item's first version's; updated_at: this one's.
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    -- The 'simple' configuration: memory holds names, identifiers and
    -- text in any language, which a language's stemmer and stop words
    -- would mangle (an English one drops "it", stems "running"); simple
    -- lowercases and splits only, the same whatever the text's language.
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', key || ' ' || value)) STORED,
    UNIQUE NULLS NOT DISTINCT (tenant_id, namespace, key, overlay)
);
CREATE INDEX memory_items_tsv ON memory_items USING gin (tsv) WHERE NOT deleted;
CREATE INDEX memory_items_data ON memory_items USING gin (data jsonb_path_ops) WHERE NOT deleted;
CREATE INDEX memory_items_expiry ON memory_items (expires_at) WHERE expires_at IS NOT NULL;

-- A purge's audit entry: who purged which prefix of which tenant, and how
-- much it removed; never the content.
CREATE TABLE memory_purges (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL,
    prefix text NOT NULL,
    actor text,
    items int NOT NULL,
    versions int NOT NULL,
    bytes bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_purges_tenant ON memory_purges (tenant_id, at);

-- A tenant's live items (real memory and overlays) and the bytes of every
-- version it keeps, changed in the transaction of each write, purge and
-- retention pass: the limits read them, and a metric shows them.
CREATE TABLE memory_usage (
    tenant_id text PRIMARY KEY,
    items bigint NOT NULL DEFAULT 0,
    bytes bigint NOT NULL DEFAULT 0
);

-- +goose Down
DROP TABLE memory_usage;
DROP TABLE memory_purges;
DROP TABLE memory_items;
DROP TABLE memory_versions;
