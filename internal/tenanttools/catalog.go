package tenanttools

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/secrets"
	"github.com/agentd/agentd/internal/tools"
)

// Source is where a catalog reads a tenant's tools (*persist.Store).
type Source interface {
	TenantTools(ctx context.Context, tenantID string) ([]agentd.TenantTool, error)
}

// DefaultTTL is how long a tenant's registry is used before it is made
// again: a tool declared or changed on another instance is seen within it
// (at once on a run that names it: a miss makes it again).
const DefaultTTL = 2 * time.Second

// Config configures a Catalog.
type Config struct {
	Source Source
	Base   *tools.Registry // the operator's tools
	Box    *secrets.Box    // opens the headers; nil: tools with headers fail to load
	// AllowHosts are the loopback and private ip:ports the tenant's URLs
	// may reach (AGENTD_HTTP_ALLOW_HOSTS); public hosts need no listing.
	AllowHosts []string
	Client     *http.Client  // nil: the tools' pooled transport
	TTL        time.Duration // 0: DefaultTTL
	// ConnectWait is how long making a registry waits for a new MCP
	// server's first connection; 0: DefaultConnectWait.
	ConnectWait time.Duration
	Logger      *slog.Logger // the MCP connections' log; nil: none
}

// Catalog gives each tenant the registry of its runs' tools. It is safe for
// concurrent use.
type Catalog struct {
	cfg    Config
	client *http.Client

	mu      sync.Mutex
	tenants map[string]cached

	remotes remotes // the connections to the tenants' MCP servers (mcp.go)
}

type cached struct {
	reg *tools.Registry
	at  time.Time
}

// New returns a catalog.
func New(cfg Config) *Catalog {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.ConnectWait <= 0 {
		cfg.ConnectWait = DefaultConnectWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Catalog{cfg: cfg, client: tools.GuardedClient(cfg.AllowHosts, cfg.Client), tenants: map[string]cached{},
		remotes: remotes{byID: map[string]*remote{}}}
}

// Base is the operator's registry.
func (c *Catalog) Base() *tools.Registry { return c.cfg.Base }

// For returns the registry of tenant's runs: the operator's tools and the
// tenant's. A registry older than the TTL, or one that lacks a tool of
// need, is made again from the source.
func (c *Catalog) For(ctx context.Context, tenant string, need ...string) (*tools.Registry, error) {
	c.mu.Lock()
	e, ok := c.tenants[tenant]
	c.mu.Unlock()
	fresh := ok && time.Since(e.at) < c.cfg.TTL
	if fresh && !slices.ContainsFunc(need, func(n string) bool { _, has := e.reg.Get(n); return !has }) {
		return e.reg, nil
	}
	reg, err := c.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.tenants[tenant] = cached{reg: reg, at: time.Now()}
	c.mu.Unlock()
	return reg, nil
}

// Forget drops tenant's registry, so that the next For makes it again: a
// change of its tools on this instance is seen at once.
func (c *Catalog) Forget(tenant string) {
	c.mu.Lock()
	delete(c.tenants, tenant)
	c.mu.Unlock()
}

// load makes tenant's registry from the source.
func (c *Catalog) load(ctx context.Context, tenant string) (*tools.Registry, error) {
	rows, err := c.cfg.Source.TenantTools(ctx, tenant)
	if err != nil {
		return nil, err
	}
	list := c.mcpTools(ctx, tenant, rows)
	if len(rows) == 0 {
		return c.cfg.Base, nil
	}
	for _, row := range rows {
		if row.Kind == agentd.ToolKindMCP {
			continue
		}
		t, err := c.Tool(row)
		if err != nil {
			// One broken row (a key that changed) must not take the
			// tenant's other tools with it: a call of it fails instead.
			list = append(list, broken{name: row.Name, err: err})
			continue
		}
		list = append(list, t)
	}
	// A tool that With leaves out (its name became an operator's tool's,
	// from an MCP server that came up since) is not offered; the tenant's
	// other tools are.
	reg, _ := c.cfg.Base.With("tenant", list)
	return reg, nil
}

// Tool is row as a webhook tool, its headers opened.
func (c *Catalog) Tool(row agentd.TenantTool) (tools.Tool, error) {
	var cfg tools.WebhookConfig
	if err := json.Unmarshal(row.Config, &cfg); err != nil {
		return nil, fmt.Errorf("tool %s: its stored configuration: %w", row.Name, err)
	}
	cfg.Name = row.Name
	if row.SealedHeaders != "" {
		plain, err := c.cfg.Box.Open(row.SealedHeaders, AD(row.TenantID, row.Name))
		if err != nil {
			return nil, fmt.Errorf("tool %s: its headers: %w", row.Name, err)
		}
		if err := json.Unmarshal(plain, &cfg.Headers); err != nil {
			return nil, fmt.Errorf("tool %s: its headers: %w", row.Name, err)
		}
	}
	return tools.NewWebhook(cfg, c.client)
}

// Seal seals a tool's headers for its row; "" for none.
func (c *Catalog) Seal(tenant, name string, headers map[string]string) (string, error) {
	if len(headers) == 0 {
		return "", nil
	}
	plain, err := json.Marshal(headers)
	if err != nil {
		return "", err
	}
	return c.cfg.Box.Seal(plain, AD(tenant, name))
}

// CanSeal reports whether the server has a key to seal headers with.
func (c *Catalog) CanSeal() bool { return c.cfg.Box.HasKey() }

// AllowHosts are the private ip:ports the tenants' URLs may reach.
func (c *Catalog) AllowHosts() []string { return c.cfg.AllowHosts }

// AD is the associated data a tool's sealed headers are bound to: its
// tenant and name.
func AD(tenant, name string) []byte { return []byte(tenant + "\x00" + name) }

// broken stands for a tenant's tool that could not be made: offered as
// declared would be impossible, so it is offered with its name only, and a
// call of it fails, saying why.
type broken struct {
	name string
	err  error
}

func (b broken) Spec() tools.Spec {
	return tools.Spec{Name: b.name, Description: "unavailable: " + b.err.Error(), Effect: agentd.EffectReadOnly,
		Parameters: json.RawMessage(`{"type":"object"}`)}
}

func (b broken) Invoke(context.Context, tools.Call) (json.RawMessage, error) {
	return nil, &tools.Error{Kind: tools.KindFinal, Message: "the tool is unavailable: " + b.err.Error()}
}
