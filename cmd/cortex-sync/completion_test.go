package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// complete runs the shell's completion request (cobra's __complete) and
// returns the candidates it printed, the directive line left out.
func complete(t *testing.T, args ...string) []string {
	t.Helper()
	var out, errs bytes.Buffer
	if code := run(context.Background(), append([]string{"__complete"}, args...), nil, &out, &errs); code != 0 {
		t.Fatalf("__complete %v: exit %d: %s", args, code, errs.String())
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if l != "" && !strings.HasPrefix(l, ":") {
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
	}
	return got
}

// TestCompletion: resource IDs come from the snapshot of the state dir
// (--state-dir, or the config's stateDir), by the kinds each command
// takes; rollback --to from the revisions this host applied, newest
// first; -o from the outputs each command has.
func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	sd := state.At(filepath.Join(dir, "state"))
	snap := &state.Snapshot{
		Inventory: []*state.Entry{
			{ID: "Process/web", Kind: "Process"}, {ID: "Process/worker", Kind: "Process"},
			{ID: "Command/migrate", Kind: "Command"}, {ID: "File/motd", Kind: "File", Path: "/etc/motd"},
		},
		History: []state.Applied{{Revision: "main@sha1:" + strings.Repeat("a", 40), Subject: "first"}, {Revision: "main@sha1:" + strings.Repeat("b", 40), Subject: "second"}},
	}
	if err := os.MkdirAll(sd.Path(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := sd.Save(snap); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(config, []byte("apiVersion: cortex-sync/v1alpha1\nkind: Agent\nspec:\n  stateDir: "+sd.Path()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"restart", "--state-dir", sd.Path(), "Process/w"}, "Process/web Process/worker"},
		{[]string{"stop", "--state-dir", sd.Path(), ""}, "Process/web Process/worker"},
		{[]string{"start", "--config", config, "Process/"}, "Process/web Process/worker"},
		{[]string{"logs", "--state-dir", sd.Path(), ""}, "Command/migrate Process/web Process/worker"},
		{[]string{"restart", "--state-dir", sd.Path(), "Process/web", ""}, ""}, // one argument only
		{[]string{"rollback", "--state-dir", sd.Path(), "--to", ""}, "main@sha1:" + strings.Repeat("b", 40) + " main@sha1:" + strings.Repeat("a", 40)},
		{[]string{"diff", "-o", ""}, "text json markdown"},
		{[]string{"status", "--output", ""}, "text json"},
		{[]string{"restart", "--state-dir", filepath.Join(dir, "none"), ""}, ""}, // no snapshot: nothing, no error
	} {
		if got := strings.Join(complete(t, tc.args...), " "); got != tc.want {
			t.Errorf("%v: completes %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestUnknownFlagSuggests: a mistyped flag gets the flag it is closest to.
func TestUnknownFlagSuggests(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"diff", "--prun"}, nil, &out, &errs); code == 0 {
		t.Fatal("diff --prun ran")
	}
	if want := `unknown flag: --prun (did you mean "--prune"?)`; !strings.Contains(errs.String(), want) {
		t.Errorf("stderr %q, want it to contain %q", errs.String(), want)
	}
	errs.Reset()
	run(context.Background(), []string{"sync", "--dry-rn"}, nil, &out, &errs)
	if want := `(did you mean "--dry-run"?)`; !strings.Contains(errs.String(), want) {
		t.Errorf("stderr %q, want it to contain %q", errs.String(), want)
	}
	errs.Reset()
	run(context.Background(), []string{"sync", "--zzzzzz"}, nil, &out, &errs)
	if strings.Contains(errs.String(), "did you mean") {
		t.Errorf("a flag like none gets a suggestion: %q", errs.String())
	}
}
