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
scopes: runs:read, runs:write, actions:write, admin
the database is DATABASE_URL, or --database-url before the verb`

// runKeys is `agentd keys ...`: it manages API keys in the database the
// server uses (created and migrated if needed).
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("agentd keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, keysUsage) }
	dbURL := fs.String("database-url", cmpOr(getenv("DATABASE_URL"), defaultDatabaseURL), "PostgreSQL URL (DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("keys: name a verb: create, list or revoke")
	}
	verb, rest := fs.Arg(0), fs.Args()[1:]
	vfs := flag.NewFlagSet("agentd keys "+verb, flag.ContinueOnError)
	vfs.SetOutput(stderr)
	vfs.Usage = func() { fmt.Fprintln(stderr, keysUsage) }
	tenant := vfs.String("tenant", "", "the key's tenant")
	name := vfs.String("name", "", "what the key is for")
	scopes := vfs.String("scopes", "", "comma-separated scopes")
	if err := vfs.Parse(rest); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	open := func() (*persist.Store, error) {
		if err := persist.EnsureDatabase(ctx, *dbURL); err != nil {
			return nil, fmt.Errorf("database: %w", err)
		}
		if err := persist.Migrate(ctx, *dbURL); err != nil {
			return nil, err
		}
		return persist.Open(ctx, persist.Config{URL: *dbURL, MaxConns: 2})
	}
	switch verb {
	case "create":
		sc, err := auth.ParseScopes(*scopes)
		if err != nil {
			return fmt.Errorf("keys create: --scopes: %w", err)
		}
		token, row, err := auth.NewKey(*tenant, *name, sc)
		if err != nil {
			return fmt.Errorf("keys create: %w", err)
		}
		store, err := open()
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
	case "list":
		store, err := open()
		if err != nil {
			return err
		}
		defer store.Close()
		keys, err := store.KeyList(ctx, *tenant)
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
	case "revoke":
		if vfs.NArg() != 1 {
			return errors.New("keys revoke: give the key's prefix (see agentd keys list)")
		}
		prefix := strings.TrimPrefix(vfs.Arg(0), auth.KeyMarker)
		prefix, _, _ = strings.Cut(prefix, "_")
		store, err := open()
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
	fs.Usage()
	return fmt.Errorf("keys: unknown verb %q: want create, list or revoke", verb)
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
