package config

import "strings"

// didYouMean returns "; did you mean X?" for the known name closest to
// name, or "" when none is close.
func didYouMean(name string, known []string, sep string) string {
	if s := suggest(name, known, sep); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}

// suggest returns the known name closest to name, or "" when none is close. A name that is a prefix of known names
// up to sep (a mapping given where one of its keys was meant, as in
// IDEMPOTENCY_PROXY_UPSTREAM) suggests the first of them.
func suggest(name string, known []string, sep string) string {
	// Up to one edit in four characters, and at least one, is a typo.
	best, bestDist := "", len(name)/4+2
	for _, k := range known {
		if d := distance(strings.ToLower(name), strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		for _, k := range known {
			if strings.HasPrefix(k, name+sep) {
				best = k
				break
			}
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b: edits,
// with a swap of two neighbours counted as one ("tiemout", "timeout").
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range cur {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
