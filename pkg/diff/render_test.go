package diff

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// samplePlan has one change of every shape a user sees.
func samplePlan() *Plan {
	return &Plan{
		Source:   state.Source{Type: "dir", URL: "/srv/repo", Path: "hosts/web1"},
		Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567",
		Changes: []*Change{
			{ID: "Directory/app", Kind: "Directory", Path: "/etc/app", Action: NoOp},
			{ID: "File/app-config", Kind: "File", Path: "/etc/app/config.yaml", Action: Create, Reason: AddedInGit,
				Attrs:   []Attr{{Field: "mode", After: "0640"}},
				Content: ContentChange(nil, []byte("listen: 127.0.0.1:8080\n"), false)},
			{ID: "File/motd", Kind: "File", Path: "/etc/motd", Action: Update, Reason: Drifted,
				Attrs:   []Attr{{Field: "mode", Before: "0666", After: "0644"}},
				Content: ContentChange([]byte("a\nb\nc\nd\ne\nf\ng\nhacked\n"), []byte("a\nb\nc\nd\ne\nf\ng\nwelcome\n"), false)},
			{ID: "File/token", Kind: "File", Path: "/etc/token", Action: Update, Reason: ChangedInGit,
				Content: ContentChange([]byte("old"), []byte("new"), true)},
			{ID: "Directory/kb", Kind: "Directory", Path: "/srv/kb", Action: Update, Reason: Drifted, Drifted: 1,
				Files: []FileChange{{Path: "index.md", Action: Update, Reason: Drifted}, {Path: "new.md", Action: Create, Reason: AddedInGit}, {Path: "old.md", Action: Delete, Reason: RemovedFromGit, Backup: true}}},
			{ID: "Symlink/current", Kind: "Symlink", Path: "/srv/current", Action: Update, Reason: ChangedInGit,
				Attrs: []Attr{{Field: "target", Before: "/srv/v1", After: "/srv/v2"}}},
			{ID: "Process/web", Kind: "Process", Action: Restart, Reason: ChangedInGit},
			{ID: "File/legacy", Kind: "File", Path: "/etc/legacy", Action: Delete, Reason: RemovedFromGit, Prune: true},
			{ID: "File/kept", Kind: "File", Path: "/etc/kept", Action: Forget, Reason: RemovedFromGit, Record: &state.Entry{NoPrune: true}},
			{ID: "File/paused", Kind: "File", Path: "/etc/paused", Action: Update, Reason: Drifted, Suspended: true},
			{ID: "File/denied", Kind: "File", Path: "/etc/shadow", Err: errors.New("write /etc/shadow: outside the allowed paths")},
		},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update to accept):\n%s", name, got)
	}
}

func TestRenderings(t *testing.T) {
	for _, tt := range []struct {
		name   string
		render func(*bytes.Buffer, *Plan) error
	}{
		{"plan.txt", func(b *bytes.Buffer, p *Plan) error { return Text(b, p, TextOptions{}) }},
		{"plan-color.txt", func(b *bytes.Buffer, p *Plan) error { return Text(b, p, TextOptions{Color: true}) }},
		{"plan.json", func(b *bytes.Buffer, p *Plan) error { return JSON(b, p) }},
		{"plan.md", func(b *bytes.Buffer, p *Plan) error { return Markdown(b, p) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.render(&b, samplePlan()); err != nil {
				t.Fatal(err)
			}
			golden(t, tt.name, b.Bytes())
		})
	}
}

func TestSummary(t *testing.T) {
	s := samplePlan().Summary()
	want := Summary{Create: 1, Update: 4, Delete: 1, Restart: 1, Forget: 1, NoOp: 2, Drifted: 2, Errors: 1, kept: 1}
	if s != want {
		t.Fatalf("summary %+v, want %+v", s, want)
	}
	if got := s.Phrase(); got != "Plan: 1 to create, 4 to update, 0 to delete, 1 removed from Git (kept without --prune), 1 to restart, 1 to forget (2 drifted); 1 could not be planned." {
		t.Fatalf("phrase %q", got)
	}
}

func TestNoChanges(t *testing.T) {
	var b bytes.Buffer
	p := &Plan{Changes: []*Change{{ID: "File/a", Action: NoOp}}}
	Text(&b, p, TextOptions{})
	if b.String() != "No changes. The host matches the desired state.\n" {
		t.Fatalf("got %q", b.String())
	}
	if p.HasChanges() {
		t.Fatal("a no-op plan has changes")
	}
}

func TestUnified(t *testing.T) {
	tests := []struct{ a, b, want string }{
		{"", "x\n", "--- live\n+++ desired\n@@ -0,0 +1 @@\n+x\n"},
		{"x\n", "", "--- live\n+++ desired\n@@ -1 +0,0 @@\n-x\n"},
		{"a\nb\n", "a\nc\n", "--- live\n+++ desired\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n"},
		{"a", "a\n", "--- live\n+++ desired\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n"},
		// Two changes far apart make two hunks.
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "x\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\ny\n",
			"--- live\n+++ desired\n@@ -1,4 +1,4 @@\n-1\n+x\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+y\n"},
	}
	for _, tt := range tests {
		if got := Unified([]byte(tt.a), []byte(tt.b), "live", "desired"); got != tt.want {
			t.Errorf("Unified(%q, %q):\n%s\nwant:\n%s", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestContentSummaries(t *testing.T) {
	if c := ContentChange([]byte("a"), []byte("secret"), true); c.Diff != "" || !strings.Contains(c.Summary, "sensitive") {
		t.Errorf("sensitive: %+v", c)
	}
	if c := ContentChange([]byte{0, 1}, []byte{2}, false); c.Diff != "" || !strings.Contains(c.Summary, "binary") {
		t.Errorf("binary: %+v", c)
	}
	big := bytes.Repeat([]byte("x\n"), maxDiffBytes)
	if c := ContentChange(big, nil, false); c.Diff != "" || !strings.Contains(c.Summary, "large") {
		t.Errorf("large: %+v", c.Summary)
	}
}

// TestEveryRenderingCarriesEveryDetail: what the text says of a change (its
// detail, a guard the export cannot answer, a forget's why, a suspended
// change's action) and the plan's warnings, the markdown says too, and the
// JSON carries.
func TestEveryRenderingCarriesEveryDetail(t *testing.T) {
	p := &Plan{
		Changes: []*Change{
			{ID: "Command/init", Kind: "Command", Action: Run, Reason: AddedInGit,
				Detail: "runs unless /var/lib/app/.done exists on the host: the export does not say"},
			{ID: "File/taken", Kind: "File", Path: "/etc/taken", Action: Forget, Reason: RemovedFromGit,
				Detail: "it was on the host before cortex-sync took it over; left in place"},
			{ID: "File/kept", Kind: "File", Path: "/etc/kept", Action: Forget, Reason: RemovedFromGit, Record: &state.Entry{NoPrune: true}},
			{ID: "File/gone", Kind: "File", Path: "/etc/gone", Action: Forget, Reason: RemovedFromGit, Record: &state.Entry{}},
			{ID: "File/paused", Kind: "File", Path: "/etc/paused", Action: Update, Reason: Drifted, Suspended: true},
		},
		Warnings: []string{"sync --prune would stop: refusing to prune"},
	}
	var md, js bytes.Buffer
	if err := Markdown(&md, p); err != nil {
		t.Fatal(err)
	}
	if err := JSON(&js, p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"runs unless /var/lib/app/.done exists on the host: the export does not say",
		"it was on the host before cortex-sync took it over; left in place",
		"prune disabled: left on the host, dropped from the inventory",
		"already gone from the host",
		"would update: drifted on the host",
		"sync --prune would stop: refusing to prune",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the markdown lacks %q:\n%s", want, md.String())
		}
	}
	for _, want := range []string{"the export does not say", "left in place", "sync --prune would stop"} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("the JSON lacks %q", want)
		}
	}
}

// TestPruneWording: a delete owed to leaving Git is counted and said as
// kept when the plan is not for --prune, and as a delete with no caveat when
// it is.
func TestPruneWording(t *testing.T) {
	mk := func(prune bool) *Plan {
		return &Plan{Prune: prune, Changes: []*Change{
			{ID: "File/a", Kind: "File", Path: "/etc/a", Action: Delete, Reason: RemovedFromGit, Prune: true},
			{ID: "File/b", Kind: "File", Path: "/etc/b", Action: Delete, Reason: DeclaredAbsent},
		}}
	}
	for _, tt := range []struct {
		prune          bool
		phrase, line   string
		mdLine, absent string
	}{
		{false, "Plan: 0 to create, 0 to update, 1 to delete, 1 removed from Git (kept without --prune).",
			"- File/a  /etc/a  (removed from Git; kept without --prune)\n",
			"| delete | `File/a` | `/etc/a` | removed from Git; kept without --prune |", "deleted only with"},
		{true, "Plan: 0 to create, 0 to update, 2 to delete.",
			"- File/a  /etc/a  (removed from Git)\n",
			"| delete | `File/a` | `/etc/a` | removed from Git |", "--prune"},
	} {
		p := mk(tt.prune)
		if got := p.Summary().Phrase(); got != tt.phrase {
			t.Errorf("prune=%v: phrase %q, want %q", tt.prune, got, tt.phrase)
		}
		var txt, md bytes.Buffer
		Text(&txt, p, TextOptions{})
		Markdown(&md, p)
		if !strings.Contains(txt.String(), tt.line) || strings.Contains(txt.String(), tt.absent) {
			t.Errorf("prune=%v: text:\n%s", tt.prune, txt.String())
		}
		if !strings.Contains(md.String(), tt.mdLine) || strings.Contains(md.String(), tt.absent) {
			t.Errorf("prune=%v: markdown:\n%s", tt.prune, md.String())
		}
	}
}
