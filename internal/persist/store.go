package persist

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/migrations"
)

// Sentinel errors that callers branch on.
var (

	// ErrLeaseLost: the run's epoch moved on; this worker no longer owns it.
	ErrLeaseLost = errors.New("lease lost")

	// ErrInvalidValue is agentd.ErrInvalidValue: PostgreSQL refused a
	// value as data (SQLSTATE class 22).
	ErrInvalidValue = agentd.ErrInvalidValue
	// ErrConstraint: a constraint other than a unique key refused the write
	// (SQLSTATE class 23: a foreign key, a check, a not-null).
	ErrConstraint = errors.New("constraint violated")
)

// notFound returns as, which names what was not found, for an ErrNotFound,
// and err otherwise.
func notFound(err, as error) error {
	if errors.Is(err, agentd.ErrNotFound) && !errors.Is(err, as) {
		return as
	}
	return err
}

// Publisher learns of the commits that appended events to runs, so that
// their streams on this instance are woken and other instances told. Its
// methods are called after the commit, must not block, and must not modify
// what they are handed.
type Publisher interface {
	// Published says that a commit appended a run's events up to lastSeq.
	Published(runID string, lastSeq int64)
	// PublishedEvents says the same of a run's creation or a commit of the
	// executor's writes (Exec), with the events it appended to the run, in
	// order, exactly as EventsAfter reads them back.
	PublishedEvents(runID string, events []agentd.Event)
}

// NotifiedPublisher is a Publisher that the store may spare the sending of
// notifications: a tick's transaction of deferred writes (ExecDeferred)
// notifies ChannelEvents of its runs itself, one pg_notify per run in the
// same transaction, instead of a transaction of the publisher's own after
// it (two commits a tick, where one does). The store then tells it with
// PublishedNotified instead of PublishedEvents.
type NotifiedPublisher interface {
	Publisher
	// PublishedNotified is PublishedEvents for a commit that already
	// notified the other instances of the run's last seq.
	PublishedNotified(runID string, events []agentd.Event)
}

// Config configures Open.
type Config struct {
	// URL is the database's postgres:// URL.
	URL string
	// MaxConns caps the pool; 0 takes pgx's default.
	MaxConns int32
	// Publisher, when set, is told of every commit that appended events.
	Publisher Publisher
	// TenantRunsInProgress caps the runs of one tenant that run at once,
	// across instances; past it, its runs wait queued (and a run created
	// with RejectOverQuota is refused with ErrQuotaExceeded). 0: no cap.
	// With a cap, every run goes through the claim (none is claimed at
	// creation), which enforces it.
	TenantRunsInProgress int
	// Logger, when set, is told when the database becomes unavailable and
	// when it is available again: one line per change, not one per call.
	Logger *slog.Logger
	// ReplicaURL, when set, is a streaming standby of the database that
	// serves the reads that tolerate lag (replica.go).
	ReplicaURL string
	// ReplicaMaxLag is how far behind the primary the replica may be and
	// still serve; 0 takes DefaultReplicaMaxLag.
	ReplicaMaxLag time.Duration
	// MemoryLimits bound each tenant's memory (memory.go); zero fields are
	// unbounded.
	MemoryLimits agentd.MemoryLimits
}

// Store is agentd's handle on PostgreSQL.
type Store struct {
	pool   *pgxpool.Pool
	listen *pgx.ConnConfig // the LISTEN connection's (the pool's, untraced)
	health *health
	pub    Publisher // nil: nobody is told
	// replica is the read replica, nil without one.
	replica *replica

	tenantCap  int    // Config.TenantRunsInProgress
	claimCTE   string // claimCTE with tenantCap
	claimIDCTE string // claimIDCTE with tenantCap

	memLimits  agentd.MemoryLimits // Config.MemoryLimits
	vectorOnce sync.Once           // asks once whether the vector extension is installed
	vectorExt  bool

	group    atomic.Pointer[committer] // set while group commit is on
	execTx   atomic.Int64              // executor transactions committed
	execReqs atomic.Int64              // executor writes committed
}

// Open connects to the database of cfg.URL: to its writable host when it
// names several (see writableHost).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	writableHost(&pcfg.ConnConfig.Config)
	listen := pcfg.ConnConfig.Copy()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &health{log: log}
	w := &watch{h: h}
	pcfg.ConnConfig.Tracer = w
	pcfg.PrepareConn = w.keep
	pcfg.BeforeClose = w.forget
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database: %w", err)
	}
	s := &Store{pool: pool, listen: listen, health: h, pub: cfg.Publisher, tenantCap: cfg.TenantRunsInProgress,
		memLimits:  cfg.MemoryLimits,
		claimCTE:   fmt.Sprintf(claimCTE, max(0, cfg.TenantRunsInProgress)),
		claimIDCTE: fmt.Sprintf(claimIDCTE, max(0, cfg.TenantRunsInProgress))}
	if cfg.ReplicaURL != "" {
		if s.replica, err = openReplica(ctx, cfg, pool, log); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

// publish tells the publisher, if any, that a commit appended the events of
// run id up to seq (none when seq is 0).
func (s *Store) publish(id string, seq int64) {
	if s.pub != nil && seq > 0 {
		s.pub.Published(id, seq)
	}
}

// published is publish for each run of last, with its last seq.
func (s *Store) published(last map[string]int64) {
	for id, seq := range last {
		s.publish(id, seq)
	}
}

// Close closes the pool.
func (s *Store) Close() {
	if s.replica != nil {
		s.replica.close()
	}
	s.pool.Close()
}

// EnsureDatabase creates the database named in databaseURL when it does not
// exist, connecting to the server's "postgres" database to do so; with
// several hosts in the URL, on the writable one (see writableHost).
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	writableHost(&cfg.Config)
	name := cfg.Database
	if name == "" {
		return nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect: %w", err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to create database: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil {
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created by a peer
			return nil
		}
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Migrate applies the embedded migrations, holding a Postgres advisory lock so
// that several instances may start at once; with several hosts in the URL,
// on the writable one (see writableHost).
func Migrate(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	writableHost(&cfg.Config)
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return migrateDB(ctx, db)
}

func migrateDB(ctx context.Context, db *sql.DB) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migration locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migration provider: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// WithDatabase returns databaseURL with its database name replaced by name.
func WithDatabase(databaseURL, name string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("database url must be a postgres:// URL")
	}
	u.Path = "/" + strings.TrimPrefix(name, "/")
	return u.String(), nil
}

// tx runs fn in a transaction. It commits when fn returns nil and rolls back
// otherwise; the rollback runs even when ctx has ended.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	if err := fn(tx); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
		return translate(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return translate(err)
	}
	return nil
}

// translate maps driver errors to the package's sentinels. It is the one
// place that does: every error of a statement passes here before it leaves
// the package.
func translate(err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{agentd.ErrNotFound, agentd.ErrConflict, ErrLeaseLost, ErrInvalidValue, ErrConstraint,
		agentd.ErrUnavailable} {
		if errors.Is(err, known) {
			return err
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return agentd.ErrNotFound
	}
	if unavailable(err) {
		// Nothing of the call committed, unless the connection broke
		// during its commit; either way, a retry (with the same
		// idempotency key for a creation) is safe.
		return fmt.Errorf("%w: %w", agentd.ErrUnavailable, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "23505": // unique_violation
			return fmt.Errorf("%w: %s", agentd.ErrConflict, pgErr.ConstraintName)
		case pgErr.Code == "AD001": // raised by agentd_fence: a run's epoch moved on
			return ErrLeaseLost
		case pgErr.Code == "AD002": // raised by agentd_inputs_check
			return fmt.Errorf("%w: %s", agentd.ErrInputsChanged, pgErr.Message)
		case strings.HasPrefix(pgErr.Code, "22"): // data_exception
			return fmt.Errorf("%w: %s (SQLSTATE %s): %w", ErrInvalidValue, pgErr.Message, pgErr.Code, err)
		case strings.HasPrefix(pgErr.Code, "23"): // integrity_constraint_violation
			return fmt.Errorf("%w: %s (SQLSTATE %s): %w", ErrConstraint, pgErr.ConstraintName, pgErr.Code, err)
		}
	}
	return err
}
