package diff

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// applyUnified applies a diff Unified made to before, so that the fuzzer
// can check that the diff tells the whole truth.
func applyUnified(before []byte, d string) (string, error) {
	src := splitLines(before)
	lines := strings.SplitAfter(d, "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "--- ") || !strings.HasPrefix(lines[1], "+++ ") {
		return "", fmt.Errorf("no header in %q", d)
	}
	var out strings.Builder
	pos := 0
	for i := 2; i < len(lines) && lines[i] != ""; {
		var a, b string
		if _, err := fmt.Sscanf(lines[i], "@@ -%s +%s @@\n", &a, &b); err != nil {
			return "", fmt.Errorf("line %d: not a hunk header: %q", i, lines[i])
		}
		start, n, _ := strings.Cut(a, ",")
		s, err := strconv.Atoi(start)
		if err != nil {
			return "", err
		}
		if n != "0" {
			s-- // 1-based, except for an empty range
		}
		if s < pos || s > len(src) {
			return "", fmt.Errorf("hunk at %d after line %d", s, pos)
		}
		for _, l := range src[pos:s] {
			out.WriteString(l)
		}
		pos = s
		for i++; i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@"); i++ {
			l := lines[i]
			text := l[1:]
			if i+1 < len(lines) && lines[i+1] == "\\ No newline at end of file\n" {
				text = strings.TrimSuffix(text, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || src[pos] != text {
					return "", fmt.Errorf("line %d: %q does not match the old line %d", i, l, pos)
				}
				pos++
				if l[0] == ' ' {
					out.WriteString(text)
				}
			case '+':
				out.WriteString(text)
			default:
				return "", fmt.Errorf("line %d: %q", i, l)
			}
		}
	}
	for _, l := range src[pos:] {
		out.WriteString(l)
	}
	return out.String(), nil
}

// FuzzUnified: applied to the old content, the diff gives the new.
func FuzzUnified(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nB\nc\n"))
	f.Add([]byte(""), []byte("new\n"))
	f.Add([]byte("no newline"), []byte("no newline\n"))
	f.Add([]byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n"), []byte("0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13"))
	f.Add([]byte("@@ -1 +1 @@\n--- a\n"), []byte("+++ b\n\\ No newline at end of file\n"))
	f.Fuzz(func(t *testing.T, before, after []byte) {
		d := Unified(before, after, "live", "desired")
		got, err := applyUnified(before, d)
		if err != nil {
			t.Fatalf("%v\ndiff:\n%s", err, d)
		}
		if got != string(after) {
			t.Fatalf("the diff applied gives %q, want %q\ndiff:\n%s", got, after, d)
		}
	})
}

var (
	actions = []Action{NoOp, Create, Update, Delete, Forget, Restart, Run}
	reasons = []Reason{NoReason, AddedInGit, ChangedInGit, Drifted, MissingOnHost, RemovedFromGit, DeclaredAbsent, Unmanaged, Crashed, Retry}
)

// fuzzPlan is the sample plan and one change built from the fuzzer's input.
func fuzzPlan(path, errMsg, detail, file string, before, after []byte, sensitive bool, action, reason uint8, files uint8) *Plan {
	p := samplePlan()
	c := &Change{
		ID: resource.ID("File/fuzzed"), Kind: "File", Path: path,
		Action: actions[int(action)%len(actions)], Reason: reasons[int(reason)%len(reasons)],
		Detail: detail, Prune: action&0x80 != 0, Suspended: reason&0x80 != 0,
		Content: ContentChange(before, after, sensitive),
		Attrs:   []Attr{{Field: "mode", Before: path, After: detail}},
	}
	if errMsg != "" {
		c.Err = errors.New(errMsg)
	}
	for i := range int(files % 30) {
		c.Files = append(c.Files, FileChange{Path: fmt.Sprintf("%s/%d", file, i), Action: actions[i%len(actions)], Reason: reasons[i%len(reasons)], Backup: i%2 == 0})
	}
	p.Changes = append(p.Changes, c)
	return p
}

func renderAll(t *testing.T, p *Plan) (text, color, md, js string) {
	t.Helper()
	var b [4]bytes.Buffer
	if err := Text(&b[0], p, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Text(&b[1], p, TextOptions{Color: true, MaxFiles: 5}); err != nil {
		t.Fatal(err)
	}
	if err := Markdown(&b[2], p); err != nil {
		t.Fatal(err)
	}
	if err := JSON(&b[3], p); err != nil {
		t.Fatal(err)
	}
	return b[0].String(), b[1].String(), b[2].String(), b[3].String()
}

// FuzzRender renders plans with hostile paths, messages and contents:
// the JSON stays valid and whole, every Markdown table row keeps its four
// cells (a path cannot forge rows in a pull request comment), and
// sensitive content never shows.
func FuzzRender(f *testing.F) {
	f.Add("/etc/app.conf", "", "", "kb", []byte("old\n"), []byte("new secret value\n"), true, uint8(2), uint8(2), uint8(3))
	f.Add("/etc/a|b", "write: denied | retry", "running\nas pid 3", "x`y", []byte("a\nb\n"), []byte("a\nc\n"), false, uint8(1), uint8(1), uint8(0))
	f.Add("/srv/`code`\n## heading", "", "", "d|e\nf", []byte(nil), []byte("\x1b[31mred\x1b[0m\n"), false, uint8(0x83), uint8(0x85), uint8(25))
	f.Fuzz(func(t *testing.T, path, errMsg, detail, file string, before, after []byte, sensitive bool, action, reason, files uint8) {
		p := fuzzPlan(path, errMsg, detail, file, before, after, sensitive, action, reason, files)
		text, color, md, js := renderAll(t, p)

		var doc struct {
			Changes []struct {
				ID      string   `json:"id"`
				Path    string   `json:"path"`
				Content *Content `json:"content"`
			} `json:"changes"`
		}
		if err := json.Unmarshal([]byte(js), &doc); err != nil {
			t.Fatalf("JSON plan does not parse: %v\n%s", err, js)
		}
		// encoding/json writes invalid UTF-8 as U+FFFD; paths from
		// manifests are valid UTF-8 (validation refuses the rest).
		if len(doc.Changes) != len(p.Changes) || (utf8.ValidString(path) && doc.Changes[len(doc.Changes)-1].Path != path) {
			t.Fatalf("JSON plan lost changes or mangled a path: %d changes, want %d", len(doc.Changes), len(p.Changes))
		}

		rows := 0
		for _, c := range p.Changes {
			if c.Err != nil || c.Action != NoOp {
				rows++
			}
		}
		table := 0
		for _, l := range strings.Split(md, "\n") {
			if !strings.HasPrefix(l, "| ") {
				continue
			}
			table++
			if cells := len(strings.Split(strings.ReplaceAll(l, `\|`, ""), "|")) - 2; cells != 4 {
				t.Fatalf("Markdown row with %d cells, want 4: %q", cells, l)
			}
		}
		if rows > 0 && table != rows+1 {
			t.Fatalf("Markdown table has %d rows, want %d and the header:\n%s", table, rows, md)
		}

		if sensitive && len(after) >= 8 {
			// The secret shows nowhere the same plan without it does not.
			q := fuzzPlan(path, errMsg, detail, file, nil, nil, true, action, reason, files)
			bt, bc, bm, bj := renderAll(t, q)
			secret := string(after)
			for _, pair := range [][2]string{{text, bt}, {color, bc}, {md, bm}, {js, bj}} {
				if strings.Contains(pair[0], secret) && !strings.Contains(pair[1], secret) {
					t.Fatalf("sensitive content shows in a rendering:\n%s", pair[0])
				}
			}
		}
	})
}

// TestUnifiedBounded: two 200 KiB contents whose every line differs once
// took five minutes and 13 GB; the work is bounded now.
func TestUnifiedBounded(t *testing.T) {
	a := []byte(strings.Repeat("a\n", 100<<10))
	b := []byte(strings.Repeat("b\n", 100<<10))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c := ContentChange(a, b, false)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 512<<20 {
		t.Errorf("diffing 2 × 200 KiB allocated %d MiB", alloc>>20)
	}
	if got, err := applyUnified(a, c.Diff); err != nil || got != string(b) {
		t.Errorf("the wholesale diff does not apply: %v", err)
	}
}
