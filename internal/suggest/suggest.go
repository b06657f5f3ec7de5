// Package suggest finds the known name a mistyped one was meant to be:
// the one "did you mean" of every message that has one.
package suggest

import (
	"slices"
	"strings"
)

// Closest is the name of known nearest to name, within two edits (case
// ignored when fold), or "" when none is that close. Ties go to the first
// in sorted order, so a hint is stable.
func Closest(name string, known []string, fold bool) string {
	if fold {
		name = strings.ToLower(name)
	}
	best, bestD := "", 3
	for _, k := range slices.Sorted(slices.Values(known)) {
		c := k
		if fold {
			c = strings.ToLower(k)
		}
		if d := Distance(name, c); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// Distance is the Levenshtein edit distance of two short names; past 64
// bytes either way it is "far" (99), so a long input costs nothing.
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
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
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
