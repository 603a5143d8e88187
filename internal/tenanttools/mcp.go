package tenanttools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/mcptools"
	"github.com/agentd/agentd/internal/tools"
)

// A tenant's remote MCP servers (rows of kind agentd.ToolKindMCP) each get
// a connection (an mcptools.Manager of their own) when a registry of the
// tenant's runs is first made, kept while the row stays as it is: the
// server's tools join the tenant's registry, named <server>__<tool>, and
// its requests go through the operator's egress rule. A changed row gets a
// new connection; a deleted one's is closed.

// DefaultConnectWait is how long making a registry waits for a new MCP
// server's first connection; past it the registry goes without the
// server's tools, and a later one has them once it is connected.
const DefaultConnectWait = 5 * time.Second

// remote is one tenant's MCP server as this instance holds it.
type remote struct {
	key string // a fingerprint of its row: another makes a new connection
	mgr *mcptools.Manager
	reg *tools.Registry // its tools only
}

// remotes are the connections to the tenants' MCP servers.
type remotes struct {
	mu      sync.Mutex
	byID    map[string]*remote // by tenant and name (remoteID)
	stopped bool               // by Stop: no connection is made again
}

func remoteID(tenant, name string) string { return tenant + "\x00" + name }

// mcpTools returns the tools of tenant's MCP servers (rows), connecting to
// those that are new or changed and closing those that are gone.
func (c *Catalog) mcpTools(ctx context.Context, tenant string, rows []agentd.TenantTool) []tools.Tool {
	want := map[string]agentd.TenantTool{}
	for _, row := range rows {
		if row.Kind == agentd.ToolKindMCP {
			want[remoteID(tenant, row.Name)] = row
		}
	}
	var stale, started []*remote
	var list []any // a *remote, or a broken tool
	c.remotes.mu.Lock()
	if c.remotes.stopped {
		c.remotes.mu.Unlock()
		return nil // Stop closed the connections: nothing connects again
	}
	for id, r := range c.remotes.byID {
		if row, ok := want[id]; strings.HasPrefix(id, tenant+"\x00") && (!ok || fingerprint(row) != r.key) {
			stale = append(stale, r)
			delete(c.remotes.byID, id)
		}
	}
	for id, row := range want {
		r := c.remotes.byID[id]
		if r == nil {
			var err error
			if r, err = c.connect(row); err != nil {
				list = append(list, broken{name: row.Name + mcptools.Separator + "unavailable", err: err})
				continue
			}
			c.remotes.byID[id] = r
			started = append(started, r)
		}
		list = append(list, r)
	}
	c.remotes.mu.Unlock()
	for _, r := range stale {
		_ = r.mgr.Stop(context.WithoutCancel(ctx)) // its goroutine ends with its connection
	}
	wctx, cancel := context.WithTimeout(ctx, c.cfg.ConnectWait)
	defer cancel()
	for _, r := range started {
		r.mgr.WaitConnected(wctx)
	}
	return expand(list)
}

// expand replaces each remote of list by the tools its server offers now.
func expand(list []any) []tools.Tool {
	var out []tools.Tool
	for _, item := range list {
		switch v := item.(type) {
		case *remote:
			for _, spec := range v.reg.List() {
				if t, ok := v.reg.Get(spec.Name); ok {
					out = append(out, t)
				}
			}
		case tools.Tool:
			out = append(out, v)
		}
	}
	return out
}

// connect starts the connection to the MCP server of row.
func (c *Catalog) connect(row agentd.TenantTool) (*remote, error) {
	cfg, err := c.ServerConfig(row)
	if err != nil {
		return nil, err
	}
	reg, err := tools.NewRegistry()
	if err != nil {
		return nil, err
	}
	log := c.cfg.Logger.With("tenant", row.TenantID)
	r := &remote{key: fingerprint(row), reg: reg, mgr: mcptools.New(reg, []mcptools.ServerConfig{cfg}, log)}
	if err := r.mgr.Start(context.Background()); err != nil {
		return nil, err
	}
	return r, nil
}

// ServerConfig is row as an MCP server's configuration, its headers
// opened and its requests held to the egress rule.
func (c *Catalog) ServerConfig(row agentd.TenantTool) (mcptools.ServerConfig, error) {
	var m agentd.MCPServerConfig
	if err := json.Unmarshal(row.Config, &m); err != nil {
		return mcptools.ServerConfig{}, fmt.Errorf("MCP server %s: its stored configuration: %w", row.Name, err)
	}
	cfg := mcptools.ServerConfig{Name: row.Name, URL: m.URL, Tools: m.Tools, ConnectTimeoutMS: m.ConnectTimeoutMS,
		Transport: c.client.Transport}
	if row.SealedHeaders != "" {
		plain, err := c.cfg.Box.Open(row.SealedHeaders, AD(row.TenantID, row.Name))
		if err == nil {
			err = json.Unmarshal(plain, &cfg.Headers)
		}
		if err != nil {
			return cfg, fmt.Errorf("MCP server %s: its headers: %w", row.Name, err)
		}
	}
	return cfg, nil
}

// CheckMCPServer checks what a tenant declares of an MCP server as the
// operator's tools file's entries are checked.
func (c *Catalog) CheckMCPServer(name string, cfg agentd.MCPServerConfig) error {
	return mcptools.ServerConfig{Name: name, URL: cfg.URL, Tools: cfg.Tools, ConnectTimeoutMS: cfg.ConnectTimeoutMS}.Check()
}

// fingerprint tells one version of a row from another.
func fingerprint(row agentd.TenantTool) string {
	sum := sha256.Sum256([]byte(string(row.Config) + "\x00" + row.SealedHeaders))
	return hex.EncodeToString(sum[:])
}

// MCPStatus says whether this instance is connected to tenant's MCP server
// name, and the tools it offers; ok is false when it holds no connection
// to it (no registry of the tenant was made since it was declared).
func (c *Catalog) MCPStatus(tenant, name string) (agentd.MCPServerStatus, bool) {
	c.remotes.mu.Lock()
	r := c.remotes.byID[remoteID(tenant, name)]
	c.remotes.mu.Unlock()
	if r == nil {
		return agentd.MCPServerStatus{Tools: []string{}}, false
	}
	st := agentd.MCPServerStatus{Tools: []string{}}
	if all := r.mgr.Statuses(); len(all) == 1 {
		st.Connected, st.Error = all[0].Connected, all[0].Error
	}
	for _, spec := range r.reg.List() {
		st.Tools = append(st.Tools, spec.Name)
	}
	return st, true
}

// Start does nothing: a tenant's MCP server is connected to when a
// registry of its runs is first made. It is there so that the Catalog
// stops with the instance's other parts.
func (c *Catalog) Start(context.Context) error { return nil }

// Stop closes the connections to the tenants' MCP servers and waits for
// their goroutines, within ctx; from then on no connection is made again
// (a registry made later goes without the tenants' MCP tools). Stopping
// twice, or before Start, is safe.
func (c *Catalog) Stop(ctx context.Context) error {
	c.remotes.mu.Lock()
	all := c.remotes.byID
	c.remotes.byID = map[string]*remote{}
	c.remotes.stopped = true
	c.remotes.mu.Unlock()
	var errs []error
	for _, r := range all {
		if err := r.mgr.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
