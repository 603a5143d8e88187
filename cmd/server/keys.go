package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/persist"
)

const keysUsage = `usage:
  agentd keys create --tenant T --name N --scopes S1,S2   print a new key (once: only its hash is kept)
  agentd keys list [--tenant T]                            list keys (never their secrets)
  agentd keys revoke PREFIX                                revoke a key (within AGENTD_KEY_CACHE_TTL on running instances)
scopes: runs:read, runs:write, actions:write, agents:write, admin
the database is DATABASE_URL, or --database-url before the verb`

// runKeys is `agentd keys ...`: it manages API keys in the database the
// server uses (created and migrated if needed).
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	ka, err := parseKeysArgs(args, getenv, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	switch ka.verb {
	case "create":
		return keysCreate(ctx, ka, stdout, stderr)
	case "list":
		return keysList(ctx, ka, stdout)
	case "revoke":
		return keysRevoke(ctx, ka, stdout)
	}
	fmt.Fprintln(stderr, keysUsage)
	return fmt.Errorf("keys: unknown verb %q: want create, list or revoke", ka.verb)
}

// keysArgs is the command line of `agentd keys`.
type keysArgs struct {
	dbURL                string
	verb                 string
	tenant, name, scopes string
	rest                 []string // after the verb's flags
}

// parseKeysArgs reads `[--database-url URL] VERB [flags] [args]`.
func parseKeysArgs(args []string, getenv func(string) string, stderr io.Writer) (keysArgs, error) {
	var ka keysArgs
	fs := flag.NewFlagSet("agentd keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, keysUsage) }
	fs.StringVar(&ka.dbURL, "database-url", cmpOr(getenv("DATABASE_URL"), defaultDatabaseURL), "PostgreSQL URL (DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return ka, err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return ka, errors.New("keys: name a verb: create, list or revoke")
	}
	ka.verb = fs.Arg(0)
	vfs := flag.NewFlagSet("agentd keys "+ka.verb, flag.ContinueOnError)
	vfs.SetOutput(stderr)
	vfs.Usage = fs.Usage
	vfs.StringVar(&ka.tenant, "tenant", "", "the key's tenant")
	vfs.StringVar(&ka.name, "name", "", "what the key is for")
	vfs.StringVar(&ka.scopes, "scopes", "", "comma-separated scopes")
	if err := vfs.Parse(fs.Args()[1:]); err != nil {
		return ka, err
	}
	ka.rest = vfs.Args()
	return ka, nil
}

// openKeyStore opens the database of dbURL, created and migrated if need
// be, with the few connections one command needs.
func openKeyStore(ctx context.Context, dbURL string) (*persist.Store, error) {
	if err := persist.EnsureDatabase(ctx, dbURL); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := persist.Migrate(ctx, dbURL); err != nil {
		return nil, err
	}
	return persist.Open(ctx, persist.Config{URL: dbURL, MaxConns: 2})
}

// keysCreate is `agentd keys create`: it prints the new key's token, the
// only time it is shown, on stdout.
func keysCreate(ctx context.Context, ka keysArgs, stdout, stderr io.Writer) error {
	sc, err := auth.ParseScopes(ka.scopes)
	if err != nil {
		return fmt.Errorf("keys create: --scopes: %w", err)
	}
	token, row, err := auth.NewKey(ka.tenant, ka.name, sc)
	if err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	store, err := openKeyStore(ctx, ka.dbURL)
	if err != nil {
		return err
	}
	defer store.Close()
	if _, err := store.KeyInsert(ctx, row); err != nil {
		return fmt.Errorf("keys create: %w", err)
	}
	fmt.Fprintln(stdout, token)
	fmt.Fprintf(stderr, "key %s for tenant %s (%s): keep it now, it is not shown again\n", row.Prefix, row.TenantID,
		strings.Join(row.Scopes, ","))
	return nil
}

// keysList is `agentd keys list`: a table of the keys, never their secrets.
func keysList(ctx context.Context, ka keysArgs, stdout io.Writer) error {
	store, err := openKeyStore(ctx, ka.dbURL)
	if err != nil {
		return err
	}
	defer store.Close()
	keys, err := store.KeyList(ctx, ka.tenant)
	if err != nil {
		return fmt.Errorf("keys list: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PREFIX\tTENANT\tNAME\tSCOPES\tCREATED\tLAST USED\tREVOKED")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.Prefix, k.TenantID, k.Name, strings.Join(k.Scopes, ","),
			stamp(&k.CreatedAt), stamp(k.LastUsedAt), stamp(k.RevokedAt))
	}
	return tw.Flush()
}

// keysRevoke is `agentd keys revoke PREFIX`; the whole token is accepted
// too, of which only the prefix is read.
func keysRevoke(ctx context.Context, ka keysArgs, stdout io.Writer) error {
	if len(ka.rest) != 1 {
		return errors.New("keys revoke: give the key's prefix (see agentd keys list)")
	}
	prefix := strings.TrimPrefix(ka.rest[0], auth.KeyMarker)
	prefix, _, _ = strings.Cut(prefix, "_")
	store, err := openKeyStore(ctx, ka.dbURL)
	if err != nil {
		return err
	}
	defer store.Close()
	k, err := store.KeyRevoke(ctx, prefix)
	if errors.Is(err, agentd.ErrNotFound) {
		return fmt.Errorf("keys revoke: no key with prefix %q", prefix)
	}
	if err != nil {
		return fmt.Errorf("keys revoke: %w", err)
	}
	fmt.Fprintf(stdout, "revoked %s (tenant %s, %s) at %s\n", k.Prefix, k.TenantID, k.Name, stamp(k.RevokedAt))
	return nil
}

func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
