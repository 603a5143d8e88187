package mcptools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"time"

	"github.com/agentd/agentd"
)

// MetaIdempotencyKey is the _meta field of a tools/call request that holds
// the call's idempotency key (run_id:step:call_id), the same on every
// attempt of the call.
const MetaIdempotencyKey = "github.com/agentd/agentd/idempotency_key"

// Separator joins a server's name and its tool's name into the name the
// model sees.
const Separator = "__"

var serverName = regexp.MustCompile(`^[a-zA-Z0-9-]{1,32}$`)

// ServerConfig is one entry of a tools file's mcp_servers: an MCP server
// started as a command (stdio) or reached at a URL (streamable HTTP).
type ServerConfig struct {
	Name    string            `json:"name"`
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	// Tools, when given, are the only tools of the server offered.
	Tools []string `json:"tools"`
	// Overrides set, per tool, what its annotations do not say well.
	Overrides map[string]Override `json:"overrides"`
	// ConnectTimeoutMS caps one connection attempt: starting the command
	// (or reaching the URL) and MCP's initialize handshake, in
	// milliseconds; 0 means DefaultConnectTimeout, and at most
	// MaxConnectTimeout may be set.
	ConnectTimeoutMS int `json:"connect_timeout_ms"`
	// Transport, when set, carries the requests to a server at a URL (a
	// tenant's, through the egress rule: tools.GuardedClient); nil:
	// http.DefaultTransport.
	Transport http.RoundTripper `json:"-"`
}

// Bounds of a server's connect timeout. A command such as npx may first
// fetch its package, which takes tens of seconds on a cold cache, before
// the server answers initialize.
const (
	DefaultConnectTimeout = 60 * time.Second
	MaxConnectTimeout     = 10 * time.Minute
)

// ConnectTimeout is how long one connection attempt to the server may
// take: ConnectTimeoutMS, else DefaultConnectTimeout.
func (c ServerConfig) ConnectTimeout() time.Duration {
	if c.ConnectTimeoutMS > 0 {
		return time.Duration(c.ConnectTimeoutMS) * time.Millisecond
	}
	return DefaultConnectTimeout
}

// Override is what a tools file sets for one MCP tool.
type Override struct {
	Effect         agentd.Effect `json:"effect"`
	TimeoutMS      int           `json:"timeout_ms"`
	NeedsApproval  *bool         `json:"needs_approval"`
	MaxResultBytes int           `json:"max_result_bytes"`
}

// ParseFile reads the mcp_servers of a tools file; a file without them has
// none. Each entry is read strictly: an unknown field, a name that is not
// 1 to 32 letters, digits or dashes, a name used twice, neither or both of
// command and url, a url that is not http(s), an unknown effect, a
// negative limit or a connect_timeout_ms out of range is an error naming
// the entry. All problems are reported
// together.
func ParseFile(data []byte) ([]ServerConfig, error) {
	var file struct {
		MCPServers []json.RawMessage `json:"mcp_servers"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("tools file: %w", err)
	}
	var out []ServerConfig
	var errs []error
	seen := map[string]int{}
	for i, raw := range file.MCPServers {
		var c ServerConfig
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			errs = append(errs, fmt.Errorf("mcp_servers[%d]: %w", i, err))
			continue
		}
		if _, err := dec.Token(); err != io.EOF {
			errs = append(errs, fmt.Errorf("mcp_servers[%d]: unexpected data after the entry", i))
			continue
		}
		if err := c.check(); err != nil {
			errs = append(errs, fmt.Errorf("mcp_servers[%d] (%q): %w", i, c.Name, err))
			continue
		}
		if j, dup := seen[c.Name]; dup {
			errs = append(errs, fmt.Errorf("mcp_servers[%d] (%q): duplicate name, already used by mcp_servers[%d]", i, c.Name, j))
			continue
		}
		seen[c.Name] = i
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// Check checks one server's configuration as ParseFile checks an entry.
func (c ServerConfig) Check() error { return c.check() }

func (c ServerConfig) check() error {
	var errs []error
	if !serverName.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("invalid or missing name: want 1 to 32 letters, digits or dashes"))
	}
	switch {
	case c.Command == "" && c.URL == "":
		errs = append(errs, errors.New("needs command (stdio) or url (streamable HTTP)"))
	case c.Command != "" && c.URL != "":
		errs = append(errs, errors.New("has both command and url: give one"))
	case c.URL != "":
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("url %q is not an absolute http(s) URL", c.URL))
		}
		if len(c.Args) > 0 || len(c.Env) > 0 {
			errs = append(errs, errors.New("args and env are for a command"))
		}
	case c.Command != "":
		if len(c.Headers) > 0 {
			errs = append(errs, errors.New("headers are for a url"))
		}
	}
	if c.ConnectTimeoutMS < 0 || int64(c.ConnectTimeoutMS) > MaxConnectTimeout.Milliseconds() {
		errs = append(errs, fmt.Errorf("connect_timeout_ms %d is out of range: want 1 to %d (0 or absent means %d)",
			c.ConnectTimeoutMS, MaxConnectTimeout.Milliseconds(), DefaultConnectTimeout.Milliseconds()))
	}
	for name, o := range c.Overrides {
		if o.Effect != "" && !o.Effect.Valid() {
			errs = append(errs, fmt.Errorf("overrides[%q]: invalid effect %q", name, o.Effect))
		}
		if o.TimeoutMS < 0 || o.MaxResultBytes < 0 {
			errs = append(errs, fmt.Errorf("overrides[%q]: negative limit", name))
		}
	}
	return errors.Join(errs...)
}
