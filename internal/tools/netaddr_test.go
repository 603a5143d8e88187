package tools

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
)

// TestLooseIPv4: every IPv4 spelling the C library's inet_aton accepts is
// read as the address it spells; names are not addresses.
func TestLooseIPv4(t *testing.T) {
	for host, want := range map[string]string{
		"127.1": "127.0.0.1", "0x7f000001": "127.0.0.1", "2130706433": "127.0.0.1", "0177.0.0.1": "127.0.0.1",
		"0x7f.1": "127.0.0.1", "10.1.2": "10.1.0.2", "0": "0.0.0.0", "169.254.43518": "169.254.169.254",
		"8.8.8.8": "8.8.8.8", "0x08080808": "8.8.8.8",
	} {
		ip, ok := looseIPv4(host)
		if !ok || ip.String() != want {
			t.Errorf("looseIPv4(%q) = %v, %v; want %s", host, ip, ok, want)
		}
	}
	for _, host := range []string{"example.com", "1.2.3.4.5", "256.1.1.1", "1.2.3.256", "0x", "08", "1..2", "", "-1", "1e5", "4294967296"} {
		if ip, ok := looseIPv4(host); ok {
			t.Errorf("looseIPv4(%q) = %v, want no address", host, ip)
		}
	}
}

// TestEgressOfLooseSpellings: a URL whose host spells a loopback, private
// or metadata address in another form than its own is refused when it is
// declared, unless the operator allows that address; a public one must be
// given in its own spelling.
func TestEgressOfLooseSpellings(t *testing.T) {
	for _, host := range []string{"127.1", "0x7f000001", "2130706433", "0177.0.0.1", "10.1", "169.254.43518", "0"} {
		err := CheckEgress("http://"+host+":8080/hook", nil)
		if err == nil || !strings.Contains(err.Error(), "not a public address") {
			t.Errorf("%s: %v", host, err)
		}
	}
	if err := CheckEgress("http://127.1:8080/hook", []string{"127.0.0.1:8080"}); err == nil ||
		!strings.Contains(err.Error(), "must give as it is") {
		t.Errorf("an allowed address in another spelling: %v", err)
	}
	if err := CheckEgress("http://0x08080808/hook", nil); err == nil || !strings.Contains(err.Error(), "8.8.8.8") {
		t.Errorf("a public address in another spelling: %v", err)
	}
	for _, ok := range []string{"http://8.8.8.8/hook", "https://example.com/hook", "http://127.0.0.1:8080/x"} {
		allow := []string{"127.0.0.1:8080"}
		if err := CheckEgress(ok, allow); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestDescribeHidesTheResolver: what a tenant is told of a failed call
// names the host it could not resolve, never the instance's resolver.
func TestDescribeHidesTheResolver(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "hooks.example", Server: "10.96.0.10:53", IsNotFound: true}
	err := &url.Error{Op: "Post", URL: "https://hooks.example/x",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: dns}}
	got := Describe(fmt.Errorf("deliver: %w", err))
	if strings.Contains(got, "10.96.0.10") || !strings.Contains(got, `could not resolve host "hooks.example"`) {
		t.Fatalf("Describe: %q", got)
	}
	if got := Describe(&net.DNSError{Err: "server misbehaving", Name: "x.example", Server: "10.0.0.2:53"}); strings.Contains(got, "10.0.0.2") {
		t.Fatalf("Describe: %q", got)
	}
	if got := Describe(errors.New("plain")); got != "plain" {
		t.Fatalf("Describe: %q", got)
	}
}
