package fakeanthropic

import (
	"crypto/sha256"
	"encoding/json"
)

// MaxBreakpoints is how many blocks of a request may carry cache_control,
// as the real API allows.
const MaxBreakpoints = 4

// Lookback is how many blocks before a breakpoint the fake looks for a
// prefix it cached, as the real API does (about 20).
const Lookback = 20

// prefix is the request as the cache sees it: its blocks in the order
// tools, system, messages, each with the hash of the prefix that ends with
// it, the bytes up to it, and whether it carries a breakpoint.
type prefix struct {
	hash  [][sha256.Size]byte
	bytes []int64
	bp    []bool
}

// tokens is the fake's token estimate of n bytes.
func tokens(n int64) int64 { return n / 4 }

// prefixOf lays out req's blocks. Each hash chains the one before with a
// block's canonical JSON (without its cache_control), and the model's name
// starts the chain: a prefix is cached per model.
func prefixOf(req *request) prefix {
	var p prefix
	h := sha256.Sum256([]byte(req.Model))
	var total int64
	add := func(kind string, raw json.RawMessage, bp bool) {
		c := canonical(raw)
		s := sha256.New()
		s.Write(h[:])
		s.Write([]byte(kind))
		s.Write(c)
		s.Sum(h[:0])
		total += rawSize(raw, c)
		p.hash, p.bytes, p.bp = append(p.hash, h), append(p.bytes, total), append(p.bp, bp)
	}
	for _, t := range req.Tools {
		var b block
		_ = json.Unmarshal(t, &b)
		add("tool", t, b.cached())
	}
	system, _ := readBlocks(req.System)
	for _, b := range system {
		add("system", b.raw, b.cached())
	}
	for _, m := range req.Messages {
		for j, b := range m.blocks {
			kind := "+"
			if j == 0 {
				kind = m.Role // a message's first block says whose it is
			}
			add(kind, b.raw, b.cached())
		}
	}
	return p
}

// countBreakpoints returns how many blocks of req carry cache_control.
func countBreakpoints(req *request) int {
	n := 0
	for _, bp := range prefixOf(req).bp {
		if bp {
			n++
		}
	}
	return n
}

// cacheUsage is how the input of a request splits: read from the cache,
// written to it, and the rest.
type cacheUsage struct {
	total, read, write int64
}

// account splits p's input as the real API would with the prefixes of
// cached: the longest prefix cached before that ends at a breakpoint or at
// one of the Lookback blocks before one is read; the prefix up to the last
// breakpoint beyond it is written. It records the prefix of every
// breakpoint in cached.
func account(p prefix, cached map[[sha256.Size]byte]bool) cacheUsage {
	var u cacheUsage
	n := len(p.bytes)
	if n == 0 {
		return u
	}
	u.total = tokens(p.bytes[n-1])
	hit, last := -1, -1
	for i, bp := range p.bp {
		if !bp {
			continue
		}
		last = i
		for j := i; j >= 0 && j >= i-Lookback; j-- {
			if cached[p.hash[j]] {
				hit = max(hit, j)
				break
			}
		}
	}
	if hit >= 0 {
		u.read = tokens(p.bytes[hit])
	}
	if last > hit {
		u.write = tokens(p.bytes[last]) - u.read
	}
	for i, bp := range p.bp {
		if bp {
			cached[p.hash[i]] = true
		}
	}
	return u
}
