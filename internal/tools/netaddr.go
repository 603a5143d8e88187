package tools

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// looseIPv4 reads host as the C library's inet_aton reads an IPv4
// address: one to four parts separated by dots, each decimal, octal (a
// leading 0) or hexadecimal (0x), the last filling the bytes left
// (127.1 is 127.0.0.1, 2130706433 and 0x7f000001 are too). ok is false for
// a host that is no such spelling. A resolver may take such a host as the
// address it spells, or look it up as a name; agentd takes it for the
// address, so that the egress rule holds whichever a resolver does.
func looseIPv4(host string) (ip netip.Addr, ok bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals [4]uint64
	for i, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil || digits == "" || strings.ContainsAny(digits, "+-_") {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	// Every part but the last is one byte; the last fills what is left.
	n := len(parts)
	var out uint64
	for i := 0; i < n-1; i++ {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
		out = out<<8 | vals[i]
	}
	rest := uint(8 * (4 - (n - 1)))
	if vals[n-1] >= 1<<rest {
		return netip.Addr{}, false
	}
	out = out<<rest | vals[n-1]
	return netip.AddrFrom4([4]byte{byte(out >> 24), byte(out >> 16), byte(out >> 8), byte(out)}), true
}

// Describe is err, an outbound call's failure, as a tenant may be told
// it: the cause in words, without what it says of the instance's own
// network (its resolver's address, its local ports). A host that cannot
// be resolved is "could not resolve host NAME".
func Describe(err error) string {
	if err == nil {
		return ""
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		switch {
		case dns.IsNotFound:
			return fmt.Sprintf("could not resolve host %q: no such host", dns.Name)
		case dns.IsTimeout:
			return fmt.Sprintf("could not resolve host %q: the lookup timed out", dns.Name)
		}
		return fmt.Sprintf("could not resolve host %q", dns.Name)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		msg := op.Err.Error()
		if op.Addr != nil {
			msg = op.Addr.String() + ": " + msg
		}
		return op.Op + " " + msg
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err.Error()
	}
	return err.Error()
}
