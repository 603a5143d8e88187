package mcptools

import (
	"strings"
	"testing"
	"time"
)

// TestParseConnectTimeout: connect_timeout_ms is read per server, its
// absence is DefaultConnectTimeout, and a value that is negative, above
// MaxConnectTimeout, a fraction or not a number is refused with an error
// naming the entry and the field.
func TestParseConnectTimeout(t *testing.T) {
	t.Parallel()
	cfgs, err := ParseFile([]byte(`{"mcp_servers": [
		{"name": "slow", "command": "npx", "args": ["-y", "pkg"], "connect_timeout_ms": 120000},
		{"name": "plain", "url": "http://127.0.0.1:1/mcp"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfgs[0].ConnectTimeout(); got != 2*time.Minute {
		t.Errorf("slow: connect timeout %v, want 2m", got)
	}
	if got := cfgs[1].ConnectTimeout(); got != DefaultConnectTimeout {
		t.Errorf("plain: connect timeout %v, want the default %v", got, DefaultConnectTimeout)
	}
	if DefaultConnectTimeout < 60*time.Second {
		t.Errorf("the default connect timeout %v is shorter than npx fetching a package", DefaultConnectTimeout)
	}

	for value, want := range map[string]string{
		`-1`:                   "connect_timeout_ms -1 is out of range: want 1 to 600000",
		`600001`:               "connect_timeout_ms 600001 is out of range",
		`9223372036854775807`:  "connect_timeout_ms 9223372036854775807 is out of range",
		`1.5`:                  "connect_timeout_ms",
		`"30s"`:                "connect_timeout_ms",
		`99999999999999999999`: "connect_timeout_ms",
	} {
		_, err := ParseFile([]byte(`{"mcp_servers": [{"name": "bad", "command": "x", "connect_timeout_ms": ` + value + `}]}`))
		if err == nil || !strings.Contains(err.Error(), "mcp_servers[0]") || !strings.Contains(err.Error(), want) {
			t.Errorf("connect_timeout_ms %s: err = %v, want one naming mcp_servers[0] and containing %q", value, err, want)
		}
	}
}
