package diff

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	testMade   = MadeFor{Host: "h1", Root: "/", StateDir: "/var/lib/cortex-sync", Lineage: "l1", Serial: 7, Time: time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)}
	testPolicy = SavedPolicy{}
)

// savedPlan is samplePlan saved, with text that is not UTF-8 in a path and
// a content diff: what a host may hold.
func savedPlan(t *testing.T) ([]byte, *Plan) {
	t.Helper()
	p := samplePlan()
	p.Changes[2].Content.Diff += "+caf\xe9\n"
	p.Changes[4].Files[0].Path = "caf\xe9.md"
	var b bytes.Buffer
	if err := WriteSaved(&b, p, testMade, testPolicy); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), p
}

// handEdit decodes a saved plan, changes it, and encodes it again; reseal
// makes its digest again, as a hand that knows how would.
func handEdit(t *testing.T, data []byte, reseal bool, fn func(f *savedFile)) []byte {
	t.Helper()
	var f savedFile
	if err := decodeFile(json.NewDecoder(bytes.NewReader(data)), &f); err != nil {
		t.Fatal(err)
	}
	fn(&f)
	if reseal {
		f.Digest = f.digest()
	}
	out, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func differs(t *testing.T, data []byte, fresh *Plan) []string {
	t.Helper()
	s, err := ReadSaved(bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	return s.Differs(fresh)
}

func TestSavedAsWritten(t *testing.T) {
	data, p := savedPlan(t)
	if got := differs(t, data, p); len(got) != 0 {
		t.Fatalf("a plan read back differs from itself:\n%s", strings.Join(got, "\n"))
	}
	// Formatting is not content: the same plan, compact, still holds.
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		t.Fatal(err)
	}
	if got := differs(t, compact.Bytes(), p); len(got) != 0 {
		t.Fatalf("the compacted plan differs:\n%s", strings.Join(got, "\n"))
	}
}

// A policy edited after review is named with the prune it decides, even
// when the file's digest was made again.
func TestSavedPolicyForged(t *testing.T) {
	data, p := savedPlan(t)
	for _, reseal := range []bool{false, true} {
		forged := handEdit(t, data, reseal, func(f *savedFile) { f.Policy.Prune, f.Policy.AllowEmpty = true, true })
		got := differs(t, forged, p)
		want := []string{
			"policy.prune: the plan file says true; it was planned with false (File/legacy)",
			"policy.allowEmpty: the plan file says true; it was planned with false (File/legacy)",
		}
		if !reseal {
			want = append([]string{"the plan file was edited: its digest"}, want...)
		}
		match(t, got, want)
	}
}

// Every field a reviewer reads is compared with the plan made again, and
// named by change and field, whatever the file's digest says.
func TestSavedShownForged(t *testing.T) {
	data, p := savedPlan(t)
	for _, tc := range []struct {
		name string
		edit func(f *savedFile)
		want string
	}{
		{"content diff", func(f *savedFile) {
			f.Changes[2].Content.Diff = strings.Replace(f.Changes[2].Content.Diff, "+welcome", "+welcome (typo fix)", 1)
		}, `File/motd: content diff, line 8: the plan shows "+welcome (typo fix)"; this sync has "+welcome"`},
		{"content summary", func(f *savedFile) { f.Changes[3].Content.Summary = "3 bytes, unchanged" },
			`File/token: content summary: the plan shows "3 bytes, unchanged"; this sync has "sensitive content hidden (3 → 3 bytes)"`},
		{"action", func(f *savedFile) { f.Changes[7].Action = Forget },
			"File/legacy: planned forget (removed from Git); now delete (removed from Git)"},
		{"reason", func(f *savedFile) { f.Changes[2].Reason = ChangedInGit },
			"File/motd: planned update (changed in Git); now update (drifted on the host)"},
		{"attribute", func(f *savedFile) { f.Changes[2].Attrs[0].After = "0600" },
			`File/motd: attributes: the plan shows "mode": "0666" → "0600"; this sync has "mode": "0666" → "0644"`},
		{"file", func(f *savedFile) { f.Changes[4].Files[2].Backup = false },
			`Directory/kb: files[2]: the plan shows delete "old.md" (removed from Git); this sync has delete "old.md" (removed from Git), backed up first`},
		{"prune", func(f *savedFile) { f.Changes[7].Prune = false },
			"File/legacy: prune: the plan shows false; this sync has true"},
		{"path", func(f *savedFile) { f.Changes[2].Path = "/etc/issue" },
			`File/motd: path: the plan shows "/etc/issue"; this sync has "/etc/motd"`},
		{"summary", func(f *savedFile) { f.Summary.NoOp = 0 },
			`summary: the plan shows {"hasChanges":true,"summary":{"create":1,"update":4,"delete":1,"forget":1,"restart":1,"run":0,"adopt":0,"noOp":0,`},
		{"warnings", func(f *savedFile) { f.Warnings = []string{"all is well"} },
			`warnings: the plan shows ["all is well"]; this sync has []`},
		{"gone", func(f *savedFile) { f.Changes = f.Changes[:len(f.Changes)-1] },
			"File/denied: not in the plan; now no change"},
		{"order", func(f *savedFile) { f.Changes[0], f.Changes[1] = f.Changes[1], f.Changes[0] },
			"changes: listed in another order than this sync would apply them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := differs(t, handEdit(t, data, true, tc.edit), p)
			match(t, got, []string{tc.want})
		})
	}
}

// An edited digest, or an edited change's facts, is an edit of the file,
// never a host or a record that moved; a host that moved is.
func TestSavedDigestEdited(t *testing.T) {
	data, p := savedPlan(t)
	got := differs(t, handEdit(t, data, false, func(f *savedFile) { f.Digest = "sha256:" + strings.Repeat("0", 64) }), p)
	match(t, got, []string{"the plan file was edited: its digest sha256:" + strings.Repeat("0", 64) + " does not match its content (sha256:"})

	got = differs(t, handEdit(t, data, false, func(f *savedFile) { f.Changes[2].Facts = "sha256:" + strings.Repeat("1", 64) }), p)
	match(t, got, []string{"the plan file was edited: its digest", "File/motd: facts: the plan shows sha256:" + strings.Repeat("1", 64) + "; this sync has sha256:"})

	moved := samplePlan()
	moved.Changes[2].Content.Diff += "+caf\xe9\n"
	moved.Changes[4].Files[0].Path = "caf\xe9.md"
	moved.Changes[2].Observed.Live = "size 9, mtime 12:00"
	match(t, differs(t, data, moved), []string{"File/motd: planned update (drifted on the host); the host or the record changed since"})
}

// match checks that got has as many lines as want, each starting with
// its own.
func match(t *testing.T, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.HasPrefix(got[i], want[i])
	}
	if !ok {
		t.Errorf("got:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A plan file is read up to its limit and no further, whatever reader it
// comes from; CheckSize refuses by the size alone.
func TestReadSavedLimit(t *testing.T) {
	data, _ := savedPlan(t)
	limit := int64(len(data)) - 1
	// An endless reader: what a pipe or a device may be.
	r := io.MultiReader(bytes.NewReader(data), endless{})
	if _, err := ReadSaved(r, int64(len(data))); !errors.Is(err, ErrTooLarge) {
		t.Errorf("an endless plan: %v, want ErrTooLarge", err)
	}
	if _, err := ReadSaved(bytes.NewReader(data), limit); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a plan over the limit by a byte: %v, want ErrTooLarge", err)
	}
	if _, err := ReadSaved(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Errorf("a plan at the limit: %v", err)
	}
	err := CheckSize(400<<20, 0)
	if !errors.Is(err, ErrTooLarge) || err.Error() != "400 MiB, more than the 64 MiB a saved plan may be (--limit-plan-bytes)" {
		t.Errorf("CheckSize(400 MiB) = %v", err)
	}
	if err := CheckSize(DefaultLimit, 0); err != nil {
		t.Errorf("CheckSize(DefaultLimit) = %v", err)
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// A field given twice is refused: a reader sees the first, a decoder
// would keep the last. So is a field cortex-sync does not write.
func TestReadSavedStrict(t *testing.T) {
	data, _ := savedPlan(t)
	for name, re := range map[string]*regexp.Regexp{
		`"policy" is given twice`: regexp.MustCompile(`(?m)^  "policy": \{`),
		`"action" is given twice`: regexp.MustCompile(`"action": "update",`),
		`"after" is given twice`:  regexp.MustCompile(`"after": "0644"`),
		`unknown field "note"`:    regexp.MustCompile(`"facts":`),
	} {
		loc := re.FindIndex(data)
		if loc == nil {
			t.Fatalf("%s: no %s in the plan", name, re)
		}
		var insert string
		switch {
		case strings.Contains(name, "policy"):
			insert = `  "policy": {"prune": true},` + "\n"
		case strings.Contains(name, "action"):
			insert = `"action": "no-op", `
		case strings.Contains(name, "after"):
			insert = `"after": "0600", `
		default:
			insert = `"note": "x", `
		}
		edited := string(data[:loc[0]]) + insert + string(data[loc[0]:])
		_, err := ReadSaved(strings.NewReader(edited), 0)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
