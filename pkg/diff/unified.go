package diff

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxDiffBytes is the largest content shown as a diff; larger is summarised.
const maxDiffBytes = 256 << 10

// ContentChange describes how content goes from before to after (before nil:
// created). Sensitive, binary and large content is summarised, never shown.
func ContentChange(before, after []byte, sensitive bool) *Content {
	switch {
	case sensitive:
		return &Content{Summary: "sensitive content hidden" + sizes(before, after)}
	case isBinary(before) || isBinary(after):
		return &Content{Summary: "binary content" + sizes(before, after)}
	case len(before) > maxDiffBytes || len(after) > maxDiffBytes:
		return &Content{Summary: "large content" + sizes(before, after)}
	}
	return &Content{Diff: Unified(before, after, "live", "desired")}
}

func sizes(before, after []byte) string {
	if before == nil {
		return fmt.Sprintf(" (%d bytes)", len(after))
	}
	return fmt.Sprintf(" (%d → %d bytes)", len(before), len(after))
}

func isBinary(b []byte) bool {
	head := b[:min(len(b), 8000)]
	return bytes.IndexByte(head, 0) >= 0 || !utf8.Valid(head[:utf8ValidPrefix(head)])
}

// utf8ValidPrefix trims a rune cut in half at the end of a truncated head.
func utf8ValidPrefix(b []byte) int {
	for i := len(b); i > 0 && i > len(b)-utf8.UTFMax; i-- {
		if utf8.Valid(b[:i]) {
			return i
		}
	}
	return len(b)
}

type edit struct {
	op   byte // ' ', '-', '+'
	line string
}

// Unified renders a unified diff with three lines of context.
func Unified(before, after []byte, from, to string) string {
	a, b := splitLines(before), splitLines(after)
	edits := lineDiff(a, b)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", from, to)
	const ctx = 3
	for i := 0; i < len(edits); {
		if edits[i].op == ' ' {
			i++
			continue
		}
		start := max(i-ctx, 0)
		end := i
		for end < len(edits) {
			if edits[end].op != ' ' {
				end++
				continue
			}
			run := end
			for run < len(edits) && edits[run].op == ' ' {
				run++
			}
			if run == len(edits) || run-end > 2*ctx {
				end = min(end+ctx, len(edits))
				break
			}
			end = run
		}
		aStart, bStart := lineNumbers(edits[:start])
		aLen, bLen := lineNumbers(edits[start:end])
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for _, e := range edits[start:end] {
			out.WriteByte(e.op)
			out.WriteString(strings.TrimSuffix(e.line, "\n"))
			out.WriteByte('\n')
			if !strings.HasSuffix(e.line, "\n") {
				out.WriteString("\\ No newline at end of file\n")
			}
		}
		i = end
	}
	return out.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// lineNumbers counts the old and new lines in edits.
func lineNumbers(edits []edit) (a, b int) {
	for _, e := range edits {
		if e.op != '+' {
			a++
		}
		if e.op != '-' {
			b++
		}
	}
	return a, b
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.SplitAfter(string(b), "\n")[:bytes.Count(b, []byte("\n"))+boolInt(b[len(b)-1] != '\n')]
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// lineDiff is Myers' O(ND) shortest edit script, after the common prefix
// and suffix are set aside. Past maxD differences it gives up on
// minimality and replaces the middle wholesale. Each step keeps only the
// diagonals it can reach (2d+1), so the trace takes O(maxD²) memory
// whatever the size of the content: keeping all n+m of them took 13 GB and
// five minutes for two 200 KiB files of differing lines.
func lineDiff(a, b []string) []edit {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	out := make([]edit, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		out = append(out, edit{' ', l})
	}
	out = append(out, myers(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		out = append(out, edit{' ', l})
	}
	return out
}

func myers(a, b []string) []edit {
	const maxD = 2000
	n, m := len(a), len(b)
	offset := n + m + 1
	v := make([]int, 2*offset+1)
	var trace [][]int // trace[d][k+d] is v[offset+k] before step d
	found := false
	for d := 0; d <= n+m && d <= maxD && !found; d++ {
		trace = append(trace, append([]int(nil), v[offset-d:offset+d+1]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[offset+k-1] < v[offset+k+1]) {
				x = v[offset+k+1]
			} else {
				x = v[offset+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[offset+k] = x
			if x >= n && y >= m {
				found = true
				break
			}
		}
	}
	if !found {
		var out []edit
		for _, l := range a {
			out = append(out, edit{'-', l})
		}
		for _, l := range b {
			out = append(out, edit{'+', l})
		}
		return out
	}
	// Walk the trace back from (n, m).
	var rev []edit
	x, y := n, m
	for d := len(trace) - 1; d >= 0; d-- {
		vd := trace[d]
		k := x - y
		var prevK int
		if k == -d || (k != d && vd[k-1+d] < vd[k+1+d]) {
			prevK = k + 1
		} else {
			prevK = k - 1
		}
		prevX := 0
		if d > 0 {
			prevX = vd[prevK+d]
		}
		prevY := prevX - prevK
		for x > prevX && y > prevY {
			rev = append(rev, edit{' ', a[x-1]})
			x, y = x-1, y-1
		}
		if d > 0 {
			if x == prevX {
				rev = append(rev, edit{'+', b[y-1]})
			} else {
				rev = append(rev, edit{'-', a[x-1]})
			}
		}
		x, y = prevX, prevY
	}
	out := make([]edit, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out
}
