package memory

import (
	"slices"

	"github.com/agentd/agentd"
)

// RRFK is the k of reciprocal rank fusion: a hit's score is the sum, over
// the lists it is in, of 1/(k + its rank there). 60 is the value of the
// method's paper (Cormack et al., 2009), which damps the weight of the
// first places so that agreement between the lists counts more than a
// first place in one.
const RRFK = 60

// Fuse scores each hit by reciprocal rank fusion of its full-text rank
// and its vector rank, orders them by score (ties: by full-text rank, then
// by vector rank, then as given), and keeps the first limit (0: all).
func Fuse(hits []agentd.MemoryHit, limit int) []agentd.MemoryHit {
	out := slices.Clone(hits)
	for i := range out {
		out[i].Score = 0
		if r := out[i].TextRank; r > 0 {
			out[i].Score += 1 / float64(RRFK+r)
		}
		if r := out[i].VectorRank; r > 0 {
			out[i].Score += 1 / float64(RRFK+r)
		}
	}
	slices.SortStableFunc(out, func(a, b agentd.MemoryHit) int {
		switch {
		case a.Score != b.Score:
			if a.Score > b.Score {
				return -1
			}
			return 1
		case rank(a.TextRank) != rank(b.TextRank):
			return rank(a.TextRank) - rank(b.TextRank)
		}
		return rank(a.VectorRank) - rank(b.VectorRank)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// rank orders an absent rank (0) last.
func rank(r int) int {
	if r == 0 {
		return 1 << 30
	}
	return r
}
