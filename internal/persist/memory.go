package persist

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentd/agentd"
)

// Memory (docs/memory.md, migrations/00046_memory.sql). Every write adds a
// row to memory_versions and replaces the item's row in memory_items, in
// one transaction that also moves the tenant's memory_usage and checks the
// limits (Config.MemoryLimits). The item's current row is its lock: a
// write reads it FOR UPDATE, so concurrent writes of one item take turns
// and number their versions without a gap.
//
// Every method takes the tenant, and a view (agentd.MemoryView): the
// namespace prefixes the caller may reach (runs pass theirs; nil: all of
// the tenant's), and an overlay. Reads without an overlay or an as-of time
// read memory_items, and search its indexes; the others read the versions,
// the latest of each item at its time (for an overlay: real memory as of
// its base, the overlay's own versions over it).

// memoryCols read an item from a row of vis (memoryCurrentCTE's or
// memoryAsOfCTE's) or of memory_items.
const memoryCols = `namespace, key, version, value, data, deleted, source, coalesce(actor, ''),
	coalesce(run_id::text, ''), coalesce(step, 0), coalesce(tool_call_id, ''), coalesce(extracted_from::text, ''),
	coalesce(overlay::text, ''), created_at, updated_at, expires_at, bytes, embedding`

func scanMemory(row pgx.Row, extra ...any) (agentd.MemoryItem, error) {
	var it agentd.MemoryItem
	var ns string
	var data []byte
	dest := []any{&ns, &it.Key, &it.Version, &it.Value, &data, &it.Deleted, &it.Source, &it.Actor, &it.RunID,
		&it.Step, &it.ToolCallID, &it.ExtractedFrom, &it.Overlay, &it.CreatedAt, &it.UpdatedAt, &it.ExpiresAt,
		&it.Bytes, &it.Embedding}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return it, notFound(translate(err), agentd.ErrMemoryNotFound)
	}
	it.Namespace = agentd.ParseNamespace(ns)
	if data != nil {
		it.Data = data
	}
	return it, nil
}

// memoryPrefix keeps the rows whose namespace is @lo or lies under it
// (every row for ”); the range on @lo and @hi lets the btree find them.
const memoryPrefix = `namespace >= @lo AND (@hi::text IS NULL OR namespace < @hi::text)
	AND (@lo = '' OR namespace = @lo OR starts_with(namespace, @lo || '/'))`

// memoryReach keeps the rows under one of @allowed (NULL: all).
const memoryReach = `(@allowed::text[] IS NULL OR EXISTS (SELECT 1 FROM unnest(@allowed::text[]) a
	WHERE a = '' OR namespace = a OR starts_with(namespace, a || '/')))`

// memoryLive keeps the items not expired at @now (NULL: now).
const memoryLive = `(expires_at IS NULL OR expires_at > coalesce(@now::timestamptz, now()))`

// memoryCurrentCTE is vis, the live items under the prefix now, in real
// memory.
const memoryCurrentCTE = `vis AS (SELECT tenant_id, namespace, key, version, value, data, deleted, source, actor,
	run_id, step, tool_call_id, extracted_from, overlay, created_at, updated_at, expires_at, bytes, embedding,
	embedding_model, tsv
	FROM memory_items WHERE tenant_id = @tenant AND overlay IS NULL AND NOT deleted AND ` + memoryPrefix + `)`

// memoryAsOfCTE is vis as of a time, and under an overlay: each item's
// latest version of the overlay's written by @as_of, else of real
// memory's written by @real_as_of, unless it is a tombstone.
const memoryAsOfCTE = `vis AS (SELECT v.tenant_id, v.namespace, v.key, v.version, v.value, v.data, v.deleted, v.source,
	v.actor, v.run_id, v.step, v.tool_call_id, v.extracted_from, v.overlay,
	(SELECT min(f.created_at) FROM memory_versions f WHERE f.tenant_id = v.tenant_id AND f.namespace = v.namespace
		AND f.key = v.key AND (f.overlay IS NULL OR f.overlay = @overlay::uuid)) AS created_at,
	v.created_at AS updated_at, v.expires_at, v.bytes, v.embedding, v.embedding_model,
	to_tsvector('simple', v.key || ' ' || v.value) AS tsv
	FROM (SELECT DISTINCT ON (namespace, key) * FROM memory_versions
		WHERE tenant_id = @tenant AND ` + memoryPrefix + `
		  AND ((overlay IS NULL AND created_at <= coalesce(@real_as_of::timestamptz, 'infinity'))
		    OR (overlay = @overlay::uuid AND created_at <= coalesce(@as_of::timestamptz, 'infinity')))
		ORDER BY namespace, key, (overlay IS NULL), version DESC) v
	WHERE NOT v.deleted)`

// memoryArgs are the named arguments of the CTEs and filters: the view's,
// the prefix's range, and the times.
func memoryArgs(tenant string, v agentd.MemoryView, prefix agentd.Namespace, asOf *time.Time) pgx.NamedArgs {
	lo := prefix.String()
	var hi *string
	if lo != "" {
		h := lo + "0" // '0' follows '/'
		hi = &h
	}
	var allowed []string
	if v.Allowed != nil {
		allowed = make([]string, 0, len(v.Allowed))
		for _, p := range v.Allowed {
			allowed = append(allowed, p.String())
		}
	}
	real := asOf
	if !v.Base.IsZero() && (real == nil || v.Base.Before(*real)) {
		real = &v.Base
	}
	return pgx.NamedArgs{"tenant": tenant, "lo": lo, "hi": hi, "allowed": allowed, "overlay": nullable(v.Overlay),
		"as_of": asOf, "real_as_of": real, "now": asOf}
}

// memoryCTE is the vis that a view and an as-of time read.
func memoryCTE(v agentd.MemoryView, asOf *time.Time) string {
	if v.Overlay != "" || asOf != nil {
		return memoryAsOfCTE
	}
	return memoryCurrentCTE
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MemoryGet returns an item's current version, or with AsOf the version
// current then; under an overlay, the overlay's over real memory as of
// its base. agentd.ErrMemoryNotFound: no live item there (then), or none
// the view reaches.
func (s *Store) MemoryGet(ctx context.Context, tenant string, ns agentd.Namespace, key string,
	o agentd.MemoryRead) (agentd.MemoryItem, error) {
	if !o.Reaches(ns) {
		return agentd.MemoryItem{}, agentd.ErrMemoryNotFound
	}
	args := memoryArgs(tenant, o.MemoryView, ns, o.AsOf)
	args["ns"], args["key"] = ns.String(), key
	return scanMemory(s.pool.QueryRow(ctx, `WITH `+memoryCTE(o.MemoryView, o.AsOf)+`
		SELECT `+memoryCols+` FROM vis WHERE namespace = @ns AND key = @key AND `+memoryLive, args))
}

// MemoryVersions returns a page of an item's versions, newest first:
// those below o.Before (0: from the latest), at most o.Limit (0: 100),
// tombstones included. Under an overlay, real memory's versions up to its
// base and the overlay's. agentd.ErrMemoryNotFound: the item has none the
// view reaches.
func (s *Store) MemoryVersions(ctx context.Context, tenant string, ns agentd.Namespace, key string,
	o agentd.MemoryRead) ([]agentd.MemoryItem, error) {
	if !o.Reaches(ns) {
		return nil, agentd.ErrMemoryNotFound
	}
	args := memoryArgs(tenant, o.MemoryView, ns, o.AsOf)
	args["ns"], args["key"], args["before"], args["limit"] = ns.String(), key, o.Before, limitOr(o.Limit, 100)
	items, err := queryAll(ctx, s.pool, func(r pgx.Row) (agentd.MemoryItem, error) { return scanMemory(r) },
		`SELECT namespace, key, version, value, data, deleted, source, coalesce(actor, ''),
			coalesce(run_id::text, ''), coalesce(step, 0), coalesce(tool_call_id, ''), coalesce(extracted_from::text, ''),
			coalesce(overlay::text, ''),
			(SELECT min(f.created_at) FROM memory_versions f WHERE f.tenant_id = v.tenant_id AND f.namespace = v.namespace
				AND f.key = v.key AND (f.overlay IS NULL OR f.overlay = @overlay::uuid)),
			created_at, expires_at, bytes, embedding
		FROM memory_versions v WHERE tenant_id = @tenant AND namespace = @ns AND key = @key
		  AND ((overlay IS NULL AND created_at <= coalesce(@real_as_of::timestamptz, 'infinity'))
		    OR (overlay = @overlay::uuid AND created_at <= coalesce(@as_of::timestamptz, 'infinity')))
		  AND (@before = 0 OR version < @before)
		ORDER BY version DESC, overlay NULLS LAST LIMIT @limit`, args)
	if err == nil && len(items) == 0 && o.Before == 0 {
		err = agentd.ErrMemoryNotFound
	}
	return items, err
}

func limitOr(n, def int) int {
	if n <= 0 {
		return def
	}
	return n
}

// MemoryList returns a page of the live items under p.Prefix that the
// view reaches, by namespace then key, after the cursor (p.AfterNamespace,
// p.AfterKey), at most p.Limit (0: 100).
func (s *Store) MemoryList(ctx context.Context, tenant string, p agentd.MemoryListParams) ([]agentd.MemoryItem, error) {
	args := memoryArgs(tenant, p.MemoryView, p.Prefix, nil)
	args["ans"], args["akey"], args["limit"] = p.AfterNamespace.String(), p.AfterKey, limitOr(p.Limit, 100)
	return queryAll(ctx, s.pool, func(r pgx.Row) (agentd.MemoryItem, error) { return scanMemory(r) },
		`WITH `+memoryCTE(p.MemoryView, nil)+`
		SELECT `+memoryCols+` FROM vis WHERE `+memoryReach+` AND `+memoryLive+`
		  AND (namespace, key) > (@ans::text COLLATE "C", @akey::text COLLATE "C")
		ORDER BY namespace, key LIMIT @limit`, args)
}

// MemorySearch searches the live items under p.Prefix that the view
// reaches and whose data contains p.Filter: by full text (the 'simple'
// configuration; an item matches any word of p.Query), and, with p.Vector,
// by the cosine similarity of the items' embeddings of p.EmbeddingModel.
// Each list is cut at p.Limit (0: 20); a hit says its place in each
// (internal/memory fuses them). Hits come in text order, then those found
// by vector alone. Without a query or a vector, the latest items.
func (s *Store) MemorySearch(ctx context.Context, tenant string, p agentd.MemorySearchParams) ([]agentd.MemoryHit, error) {
	args := memoryArgs(tenant, p.MemoryView, p.Prefix, nil)
	var filter []byte
	if len(p.Filter) > 0 {
		filter = p.Filter
	}
	args["query"], args["filter"], args["limit"] = p.Query, filter, limitOr(p.Limit, 20)
	where := ` FROM vis WHERE ` + memoryReach + ` AND ` + memoryLive + ` AND (@filter::jsonb IS NULL OR data @> @filter::jsonb)`
	cte := `WITH ` + memoryCTE(p.MemoryView, nil)
	var hits []agentd.MemoryHit
	var err error
	if p.Query == "" && p.Vector == nil {
		hits, err = queryAll(ctx, s.pool, scanHit, cte+` SELECT `+memoryCols+`, 0::float8`+where+
			` ORDER BY updated_at DESC, namespace, key LIMIT @limit`, args)
		return hits, err
	}
	if p.Query != "" {
		hits, err = queryAll(ctx, s.pool, scanHit, cte+`, q AS (SELECT to_tsquery('simple', string_agg(quote_literal(w), ' | ')) q
				FROM unnest(tsvector_to_array(to_tsvector('simple', @query))) w)
			SELECT `+memoryCols+`, ts_rank_cd(tsv, (SELECT q FROM q))::float8 AS score`+where+`
			  AND tsv @@ (SELECT q FROM q) ORDER BY score DESC, updated_at DESC, namespace, key LIMIT @limit`, args)
		if err != nil {
			return nil, err
		}
		for i := range hits {
			hits[i].TextRank, hits[i].TextScore = i+1, hits[i].Score
			hits[i].Score = 0
		}
	}
	if p.Vector == nil {
		return hits, nil
	}
	return s.memoryVectorHits(ctx, cte, where, args, p, hits)
}

// memoryVectorHits adds to hits the items nearest to p.Vector.
func (s *Store) memoryVectorHits(ctx context.Context, cte, where string, args pgx.NamedArgs, p agentd.MemorySearchParams,
	hits []agentd.MemoryHit) ([]agentd.MemoryHit, error) {
	args["vec"], args["model"] = p.Vector, p.EmbeddingModel
	// Exact: the dot product of the stored (normalised) embeddings with
	// the normalised query, over every candidate the view reaches. The
	// vector extension, where it is installed, computes the same faster
	// (its cosine distance), with no index: the dimensions vary with the
	// embedding model, which a vector column's index must fix.
	sim := `(SELECT sum(x * y) FROM unnest(embedding, @vec::real[]) AS u(x, y))::float8`
	if s.memoryVector(ctx) {
		sim = `(1 - (embedding::vector <=> @vec::real[]::vector))::float8`
	}
	near, err := queryAll(ctx, s.pool, scanHit, cte+` SELECT `+memoryCols+`, `+sim+` AS score`+where+`
		  AND embedding_model = @model AND cardinality(embedding) = cardinality(@vec::real[])
		ORDER BY score DESC, updated_at DESC, namespace, key LIMIT @limit`, args)
	if err != nil {
		return nil, err
	}
	at := map[string]int{}
	for i, h := range hits {
		at[h.Item.Namespace.String()+"\x00"+h.Item.Key] = i
	}
	for i, h := range near {
		k := h.Item.Namespace.String() + "\x00" + h.Item.Key
		j, ok := at[k]
		if !ok {
			hits = append(hits, h)
			j = len(hits) - 1
			hits[j].Score = 0
		}
		hits[j].VectorRank, hits[j].Similarity = i+1, h.Score
	}
	return hits, nil
}

func scanHit(row pgx.Row) (agentd.MemoryHit, error) {
	var h agentd.MemoryHit
	var err error
	h.Item, err = scanMemory(row, &h.Score)
	return h, err
}

// memoryVector reports whether the database has the vector extension,
// asked once.
func (s *Store) memoryVector(ctx context.Context) bool {
	s.vectorOnce.Do(func() {
		err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')`).Scan(&s.vectorExt)
		if err != nil {
			s.vectorExt = false
		}
	})
	return s.vectorExt
}

// memoryRow is what a write finds of the item it writes: its version
// (0: none), whether that one is live, and its first version's time.
type memoryRow struct {
	found     bool // a row of memory_items (of the view's overlay)
	deleted   bool // the row found is a tombstone
	version   int
	live      bool
	createdAt time.Time
}

// memoryLock reads, and locks, the item's current row; under an overlay
// without a row of its own, real memory's version as of the base.
func memoryLock(ctx context.Context, tx pgx.Tx, tenant string, v agentd.MemoryView, ns agentd.Namespace,
	key string) (memoryRow, error) {
	var r memoryRow
	var deleted bool
	var expires *time.Time
	args := memoryArgs(tenant, v, ns, nil)
	args["ns"], args["key"] = ns.String(), key
	err := tx.QueryRow(ctx, `SELECT version, deleted, expires_at, created_at FROM memory_items
		WHERE tenant_id = @tenant AND namespace = @ns AND key = @key AND overlay IS NOT DISTINCT FROM @overlay::uuid
		FOR UPDATE`, args).Scan(&r.version, &deleted, &expires, &r.createdAt)
	if err == nil {
		r.found = true
	} else if errors.Is(err, pgx.ErrNoRows) && v.Overlay != "" {
		err = tx.QueryRow(ctx, `SELECT version, deleted, expires_at,
				(SELECT min(created_at) FROM memory_versions f WHERE f.tenant_id = v.tenant_id
					AND f.namespace = v.namespace AND f.key = v.key AND f.overlay IS NULL)
			FROM memory_versions v WHERE tenant_id = @tenant AND namespace = @ns AND key = @key AND overlay IS NULL
			  AND created_at <= coalesce(@real_as_of::timestamptz, 'infinity')
			ORDER BY version DESC LIMIT 1`, args).Scan(&r.version, &deleted, &expires, &r.createdAt)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return memoryRow{}, nil
	}
	r.live = !deleted && (expires == nil || expires.After(time.Now()))
	r.deleted = r.found && deleted // real memory's tombstone is no row of the overlay's
	return r, translate(err)
}

// memoryOfCall returns the version tool call id wrote, if it wrote one
// (ok): its write made again writes nothing (migration 00049).
func memoryOfCall(ctx context.Context, tx pgx.Tx, tenant, id string) (agentd.MemoryItem, bool, error) {
	if id == "" {
		return agentd.MemoryItem{}, false, nil
	}
	it, err := scanMemory(tx.QueryRow(ctx, `SELECT namespace, key, version, value, data, deleted, source,
			coalesce(actor, ''), coalesce(run_id::text, ''), coalesce(step, 0), coalesce(tool_call_id, ''),
			coalesce(extracted_from::text, ''), coalesce(overlay::text, ''),
			(SELECT min(f.created_at) FROM memory_versions f WHERE f.tenant_id = v.tenant_id AND f.namespace = v.namespace
				AND f.key = v.key AND f.overlay IS NOT DISTINCT FROM v.overlay),
			created_at, expires_at, bytes, embedding
		FROM memory_versions v WHERE tenant_id = $1 AND tool_call_id = $2`, tenant, id))
	if errors.Is(err, agentd.ErrMemoryNotFound) {
		return agentd.MemoryItem{}, false, nil
	}
	return it, err == nil, err
}

// errMemoryRace: a concurrent first write of the item inserted its row
// first; the write is tried again, and finds it.
var errMemoryRace = errors.New("memory item created concurrently")

// MemoryPut writes a version of an item (w.Namespace, w.Key): the first,
// or the next. Under w.Overlay it writes to the overlay alone.
// agentd.ErrMemoryConflict: w.IfVersion is not the item's live version
// (0: there is none); an *agentd.MemoryLimitError: the write would pass a
// limit; agentd.ErrMemoryOutOfReach: the view does not reach the
// namespace.
func (s *Store) MemoryPut(ctx context.Context, tenant string, w agentd.MemoryWrite) (agentd.MemoryItem, error) {
	if err := checkMemoryWrite(w.MemoryView, w.Namespace, w.Key, w.Source); err != nil {
		return agentd.MemoryItem{}, err
	}
	it, err := s.memoryItemOf(w)
	if err != nil {
		return it, err
	}
	var out agentd.MemoryItem
	err = s.memoryRetry(ctx, func(tx pgx.Tx) error {
		if done, ok, err := memoryOfCall(ctx, tx, tenant, w.ToolCallID); ok || err != nil {
			out = done
			return err
		}
		cur, err := memoryLock(ctx, tx, tenant, w.MemoryView, w.Namespace, w.Key)
		if err != nil {
			return err
		}
		out, err = s.memoryPutLocked(ctx, tx, tenant, w, it, cur)
		return err
	})
	return out, err
}

// memoryPutLocked writes it, the item of w, as the version after cur,
// whose row memoryLock locked in tx: it checks w's if_version and the
// limits, and moves the tenant's counters.
func (s *Store) memoryPutLocked(ctx context.Context, tx pgx.Tx, tenant string, w agentd.MemoryWrite, it agentd.MemoryItem,
	cur memoryRow) (agentd.MemoryItem, error) {
	if err := checkIfVersion(w.IfVersion, cur); err != nil {
		return it, err
	}
	if !cur.live {
		if err := s.memoryNamespaceRoom(ctx, tx, tenant, w.Overlay, w.Namespace); err != nil {
			return it, err
		}
	}
	items := 1 // memory_usage counts the rows of memory_items that are not tombstones
	if cur.found && !cur.deleted {
		items = 0
	}
	if err := s.memoryUsageAdd(ctx, tx, tenant, int64(items), int64(it.Bytes)); err != nil {
		return it, err
	}
	return memoryWrite(ctx, tx, tenant, it, cur, w.EmbeddingModel)
}

// memoryItemOf is the version w writes, or the *agentd.MemoryLimitError
// of an item larger than one may be.
func (s *Store) memoryItemOf(w agentd.MemoryWrite) (agentd.MemoryItem, error) {
	if n, lim := w.Bytes(), s.memLimits.BytesPerItem; lim > 0 && n > lim {
		return agentd.MemoryItem{}, &agentd.MemoryLimitError{Limit: agentd.LimitBytesPerItem, Max: int64(lim), Would: int64(n)}
	}
	return agentd.MemoryItem{Namespace: w.Namespace, Key: w.Key, Value: w.Value, Data: w.Data, Source: w.Source,
		Actor: w.Actor, RunID: w.RunID, Step: w.Step, ToolCallID: w.ToolCallID, ExtractedFrom: w.ExtractedFrom,
		Overlay: w.Overlay, ExpiresAt: w.ExpiresAt, Bytes: w.Bytes(), Embedding: w.Embedding}, nil
}

// checkMemoryWrite refuses what no write may be.
func checkMemoryWrite(v agentd.MemoryView, ns agentd.Namespace, key string, src agentd.MemorySource) error {
	if err := ns.Validate(); err != nil {
		return fmt.Errorf("%w: namespace %w", agentd.ErrInvalidValue, err)
	}
	if err := agentd.ValidateMemoryKey(key); err != nil {
		return fmt.Errorf("%w: key %w", agentd.ErrInvalidValue, err)
	}
	if !v.Reaches(ns) {
		return agentd.ErrMemoryOutOfReach
	}
	switch src {
	case agentd.MemoryFromAPI, agentd.MemoryFromAgent, agentd.MemoryFromExtraction:
		return nil
	}
	return fmt.Errorf("%w: memory source %q", agentd.ErrInvalidValue, src)
}

func checkIfVersion(ifv *int, cur memoryRow) error {
	if ifv == nil {
		return nil
	}
	live := 0
	if cur.live {
		live = cur.version
	}
	if *ifv != live {
		return agentd.ErrMemoryConflict
	}
	return nil
}

// memoryRetry runs fn in a transaction, again when a concurrent first
// write of the item came first.
func (s *Store) memoryRetry(ctx context.Context, fn func(pgx.Tx) error) error {
	for i := 0; ; i++ {
		err := s.tx(ctx, fn)
		if !errors.Is(err, errMemoryRace) || i == 3 {
			if errors.Is(err, errMemoryRace) {
				return agentd.ErrMemoryConflict
			}
			return err
		}
	}
}

// memoryNamespaceRoom refuses a new item in a namespace that holds as many
// live items as it may.
func (s *Store) memoryNamespaceRoom(ctx context.Context, tx pgx.Tx, tenant, overlay string, ns agentd.Namespace) error {
	max := s.memLimits.ItemsPerNamespace
	if max <= 0 {
		return nil
	}
	var n int64
	err := tx.QueryRow(ctx, `SELECT count(*) FROM memory_items WHERE tenant_id = $1 AND namespace = $2
		AND overlay IS NOT DISTINCT FROM $3::uuid AND NOT deleted`, tenant, ns.String(), nullable(overlay)).Scan(&n)
	if err != nil {
		return err
	}
	if n >= int64(max) {
		return &agentd.MemoryLimitError{Limit: agentd.LimitItemsPerNamespace, Max: int64(max), Would: n + 1}
	}
	return nil
}

// memoryUsageAdd moves the tenant's counters, and refuses bytes past its
// limit.
func (s *Store) memoryUsageAdd(ctx context.Context, tx pgx.Tx, tenant string, items, bytes int64) error {
	var total int64
	err := tx.QueryRow(ctx, `INSERT INTO memory_usage AS u (tenant_id, items, bytes) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET items = u.items + $2, bytes = u.bytes + $3
		RETURNING bytes`, tenant, items, bytes).Scan(&total)
	if err != nil {
		return err
	}
	if max := s.memLimits.BytesPerTenant; max > 0 && bytes > 0 && total > max {
		return &agentd.MemoryLimitError{Limit: agentd.LimitBytesPerTenant, Max: max, Would: total}
	}
	return nil
}

// memoryWrite stores it as the version after cur's: its row of
// memory_versions and the item's row of memory_items.
func memoryWrite(ctx context.Context, tx pgx.Tx, tenant string, it agentd.MemoryItem, cur memoryRow,
	model string) (agentd.MemoryItem, error) {
	it.Version = cur.version + 1
	var data []byte
	if len(it.Data) > 0 {
		data = it.Data
	}
	var emb []float32
	if len(it.Embedding) > 0 {
		emb = it.Embedding
	}
	args := pgx.NamedArgs{"tenant": tenant, "overlay": nullable(it.Overlay), "ns": it.Namespace.String(), "key": it.Key,
		"version": it.Version, "value": it.Value, "data": data, "deleted": it.Deleted, "source": it.Source,
		"actor": nullable(it.Actor), "run_id": nullable(it.RunID), "step": nullableInt(it.Step),
		"tool_call_id": nullable(it.ToolCallID), "extracted_from": nullable(it.ExtractedFrom), "embedding": emb,
		"model": nullable(model), "bytes": it.Bytes, "expires_at": it.ExpiresAt}
	err := tx.QueryRow(ctx, `INSERT INTO memory_versions (tenant_id, overlay, namespace, key, version, value, data,
			deleted, source, actor, run_id, step, tool_call_id, extracted_from, embedding, embedding_model, bytes, expires_at)
		VALUES (@tenant, @overlay::uuid, @ns, @key, @version, @value, @data::jsonb, @deleted, @source, @actor,
			@run_id::uuid, @step::int, @tool_call_id, @extracted_from::uuid, @embedding::real[], @model, @bytes, @expires_at)
		RETURNING created_at`, args).Scan(&it.UpdatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return it, errMemoryRace
	}
	if err != nil {
		return it, err
	}
	it.CreatedAt = cur.createdAt
	if cur.createdAt.IsZero() {
		it.CreatedAt = it.UpdatedAt
	}
	args["created_at"], args["updated_at"] = it.CreatedAt, it.UpdatedAt
	tag, err := tx.Exec(ctx, `INSERT INTO memory_items AS m (tenant_id, overlay, namespace, key, version, value, data,
			deleted, source, actor, run_id, step, tool_call_id, extracted_from, embedding, embedding_model, bytes,
			expires_at, created_at, updated_at)
		VALUES (@tenant, @overlay::uuid, @ns, @key, @version, @value, @data::jsonb, @deleted, @source, @actor,
			@run_id::uuid, @step::int, @tool_call_id, @extracted_from::uuid, @embedding::real[], @model, @bytes, @expires_at,
			@created_at, @updated_at)
		ON CONFLICT (tenant_id, namespace, key, overlay) DO UPDATE SET version = EXCLUDED.version,
			value = EXCLUDED.value, data = EXCLUDED.data, deleted = EXCLUDED.deleted, source = EXCLUDED.source,
			actor = EXCLUDED.actor, run_id = EXCLUDED.run_id, step = EXCLUDED.step,
			tool_call_id = EXCLUDED.tool_call_id, extracted_from = EXCLUDED.extracted_from,
			embedding = EXCLUDED.embedding, embedding_model = EXCLUDED.embedding_model, bytes = EXCLUDED.bytes,
			expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
		WHERE m.version = @version - 1`, args)
	if err == nil && tag.RowsAffected() == 0 {
		return it, errMemoryRace
	}
	return it, err
}

func nullableInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// MemoryDelete writes a tombstone of an item: its next version, deleted.
// Under d.Overlay, the tombstone is the overlay's (it hides the real
// item from the overlay's reads alone). agentd.ErrMemoryNotFound: no live
// item there; agentd.ErrMemoryConflict: d.IfVersion is not its version.
func (s *Store) MemoryDelete(ctx context.Context, tenant string, d agentd.MemoryDeleteParams) (agentd.MemoryItem, error) {
	if err := checkMemoryWrite(d.MemoryView, d.Namespace, d.Key, d.Source); err != nil {
		if errors.Is(err, agentd.ErrMemoryOutOfReach) {
			err = agentd.ErrMemoryNotFound
		}
		return agentd.MemoryItem{}, err
	}
	it := agentd.MemoryItem{Namespace: d.Namespace, Key: d.Key, Deleted: true, Source: d.Source, Actor: d.Actor,
		RunID: d.RunID, Step: d.Step, ToolCallID: d.ToolCallID, Overlay: d.Overlay, Bytes: len(d.Key)}
	var out agentd.MemoryItem
	err := s.memoryRetry(ctx, func(tx pgx.Tx) error {
		if done, ok, err := memoryOfCall(ctx, tx, tenant, d.ToolCallID); ok || err != nil {
			out = done
			return err
		}
		cur, err := memoryLock(ctx, tx, tenant, d.MemoryView, d.Namespace, d.Key)
		if err != nil {
			return err
		}
		if !cur.live {
			return agentd.ErrMemoryNotFound
		}
		if err := checkIfVersion(d.IfVersion, cur); err != nil {
			return err
		}
		items := int64(0)
		if cur.found {
			items = -1
		}
		if err := s.memoryUsageAdd(ctx, tx, tenant, items, int64(it.Bytes)); err != nil {
			return err
		}
		out, err = memoryWrite(ctx, tx, tenant, it, cur, "")
		return err
	})
	return out, err
}

// MemoryPurge removes every version and current row of every item under
// p.Prefix, of real memory and every overlay (a user's right to be
// forgotten), moves the tenant's counters, and writes an audit row
// (memory_purges) with the counts, never the content.
// agentd.ErrMemoryOutOfReach: p.Allowed does not reach the prefix.
func (s *Store) MemoryPurge(ctx context.Context, tenant string, p agentd.MemoryPurgeParams) (agentd.MemoryPurged, error) {
	if err := p.Prefix.ValidatePrefix(); err != nil {
		return agentd.MemoryPurged{}, fmt.Errorf("%w: namespace prefix %w", agentd.ErrInvalidValue, err)
	}
	if !(agentd.MemoryView{Allowed: p.Allowed}).Reaches(p.Prefix) {
		return agentd.MemoryPurged{}, agentd.ErrMemoryOutOfReach
	}
	out := agentd.MemoryPurged{ID: newID()}
	args := memoryArgs(tenant, agentd.MemoryView{}, p.Prefix, nil)
	args["id"], args["actor"], args["prefix"] = out.ID, nullable(p.Actor), p.Prefix.String()
	err := s.tx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `WITH items AS (
				DELETE FROM memory_items WHERE tenant_id = @tenant AND `+memoryPrefix+` RETURNING deleted),
			versions AS (DELETE FROM memory_versions WHERE tenant_id = @tenant AND `+memoryPrefix+` RETURNING bytes),
			counts AS (SELECT (SELECT count(*) FROM items)::int AS items,
				(SELECT count(*) FROM items WHERE NOT deleted) AS live,
				(SELECT count(*) FROM versions)::int AS versions,
				(SELECT coalesce(sum(bytes), 0) FROM versions)::bigint AS bytes),
			usage AS (UPDATE memory_usage u SET items = u.items - c.live, bytes = u.bytes - c.bytes
				FROM counts c WHERE u.tenant_id = @tenant)
			INSERT INTO memory_purges (id, tenant_id, prefix, actor, items, versions, bytes)
			SELECT @id, @tenant, @prefix, @actor, items, versions, bytes FROM counts
			RETURNING items, versions, bytes, at`, args).Scan(&out.Items, &out.Versions, &out.Bytes, &out.At)
	})
	return out, err
}

// MemoryUsage returns a tenant's memory counters; "" : every tenant's
// that has some.
func (s *Store) MemoryUsage(ctx context.Context, tenant string) ([]agentd.MemoryUsage, error) {
	return queryAll(ctx, s.pool, func(r pgx.Row) (agentd.MemoryUsage, error) {
		var u agentd.MemoryUsage
		return u, translate(r.Scan(&u.Tenant, &u.Items, &u.Bytes))
	}, `SELECT tenant_id, items, bytes FROM memory_usage WHERE $1 = '' OR tenant_id = $1 ORDER BY tenant_id`, tenant)
}

// memoryRetentionBatch is how many versions one statement of a pass
// removes.
const memoryRetentionBatch = 5000

// MemoryRetentionPass removes the old versions r says (never an item's
// current one), and the items that expired (every version), moving the
// tenants' counters; it returns how many versions it removed.
func (s *Store) MemoryRetentionPass(ctx context.Context, r agentd.MemoryRetention) (int, error) {
	total := 0
	for {
		n, err := s.memoryExpire(ctx)
		total += n
		if err != nil || n < memoryRetentionBatch {
			break
		}
	}
	if r.Keep <= 0 && r.MaxAge <= 0 {
		return total, nil
	}
	var horizon *time.Time
	if r.MaxAge > 0 {
		h := time.Now().Add(-r.MaxAge)
		horizon = &h
	}
	for {
		var n int
		err := s.pool.QueryRow(ctx, `WITH doomed AS (
				SELECT ctid FROM (SELECT ctid, created_at, row_number() OVER (
					PARTITION BY tenant_id, namespace, key, overlay ORDER BY version DESC) AS n FROM memory_versions) v
				WHERE n > 1 AND ($1 = 0 OR n > $1) AND ($2::timestamptz IS NULL OR created_at < $2)
				LIMIT $3),
			del AS (DELETE FROM memory_versions m USING doomed d WHERE m.ctid = d.ctid RETURNING m.tenant_id, m.bytes),
			sums AS (SELECT tenant_id, sum(bytes) AS bytes, count(*) AS n FROM del GROUP BY tenant_id),
			usage AS (UPDATE memory_usage u SET bytes = u.bytes - s.bytes FROM sums s WHERE u.tenant_id = s.tenant_id)
			SELECT coalesce(sum(n), 0)::int FROM sums`, r.Keep, horizon, memoryRetentionBatch).Scan(&n)
		total += n
		if err != nil {
			return total, translate(err)
		}
		if n < memoryRetentionBatch {
			return total, nil
		}
	}
}

// memoryExpire removes a batch of the items that expired, with every
// version of each.
func (s *Store) memoryExpire(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `WITH gone AS (
			DELETE FROM memory_items WHERE ctid IN (SELECT ctid FROM memory_items WHERE expires_at <= now() LIMIT $1)
			RETURNING tenant_id, namespace, key, overlay, deleted),
		v AS (DELETE FROM memory_versions m USING gone g WHERE m.tenant_id = g.tenant_id AND m.namespace = g.namespace
			AND m.key = g.key AND m.overlay IS NOT DISTINCT FROM g.overlay RETURNING m.tenant_id, m.bytes),
		agg AS (SELECT tenant_id, sum(items) AS items, sum(bytes) AS bytes FROM (
			SELECT tenant_id, 1 AS items, 0 AS bytes FROM gone WHERE NOT deleted
			UNION ALL SELECT tenant_id, 0, bytes FROM v) x GROUP BY tenant_id),
		usage AS (UPDATE memory_usage u SET items = u.items - a.items, bytes = u.bytes - a.bytes
			FROM agg a WHERE u.tenant_id = a.tenant_id)
		SELECT count(*)::int FROM gone`, memoryRetentionBatch).Scan(&n)
	return n, translate(err)
}

// ConversationOverlay returns the memory overlay of tenant's conversation
// conv, and the time it reads real memory as of: those its first run was
// given, when a fork started it (compose.Overlays); "" for none.
func (s *Store) ConversationOverlay(ctx context.Context, tenant, conv string) (string, *time.Time, error) {
	var overlay *string
	var base *time.Time
	err := s.pool.QueryRow(ctx, `SELECT params->'memory'->>'overlay', (params->'memory'->>'base')::timestamptz
		FROM runs WHERE conversation_id = $1 AND tenant_id = $2 ORDER BY id LIMIT 1`, conv, tenant).Scan(&overlay, &base)
	if errors.Is(err, pgx.ErrNoRows) || overlay == nil {
		return "", nil, nil
	}
	return *overlay, base, translate(err)
}
