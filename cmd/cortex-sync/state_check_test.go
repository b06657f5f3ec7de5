package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/internal/tempwriter"
)

// TestHelperTempWriter is no test: tempwriter runs it as a writer.
func TestHelperTempWriter(t *testing.T) { tempwriter.Helper() }

// TestStateCheckLeavesALiveWritersTemp: `state check` run while another
// cortex-sync (the agent) writes into the state dir finds that writer's
// temp file and reports nothing, and `state repair` keeps it; once the
// writer is killed, the temp file it left is reported and repaired.
func TestStateCheckLeavesALiveWritersTemp(t *testing.T) {
	dir := t.TempDir()
	repo, root, st := filepath.Join(dir, "repo"), filepath.Join(dir, "root"), filepath.Join(dir, "state")
	os.MkdirAll(repo, 0o755)
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(repo, "motd.yaml"), []byte("apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: motd}\nspec: {path: /etc/motd, content: \"hi\\n\"}\n"), 0o644)
	if code, out, errs := runCLI(t, "sync", "--dir", repo, "--root", root, "--state-dir", st); code != 0 {
		t.Fatalf("sync: %d\n%s%s", code, out, errs)
	}
	w := tempwriter.Start(t, "TestHelperTempWriter", st, "state.json")
	name := filepath.Base(w.Temp)

	code, out, errs := runCLI(t, "state", "check", "--state-dir", st)
	if code != 0 || strings.Contains(out, "PROBLEM") || strings.Contains(out, name) {
		t.Fatalf("state check beside a live writer: %d\n%s%s", code, out, errs)
	}
	code, out, errs = runCLI(t, "state", "check", "--state-dir", st, "-o", "json")
	var doc struct{ Problems int }
	if err := json.Unmarshal([]byte(out), &doc); code != 0 || err != nil || doc.Problems != 0 {
		t.Fatalf("state check -o json beside a live writer: %d, %v\n%s%s", code, err, out, errs)
	}
	code, out, errs = runCLI(t, "state", "repair", "--state-dir", st)
	if code != 0 || !strings.Contains(out, "Nothing to repair.") {
		t.Fatalf("state repair beside a live writer: %d\n%s%s", code, out, errs)
	}
	if _, err := os.Lstat(w.Temp); err != nil {
		t.Fatalf("state repair removed a live writer's temp file: %v", err)
	}

	w.Kill()
	code, out, _ = runCLI(t, "state", "check", "--state-dir", st)
	if code != 1 || !strings.Contains(out, "PROBLEM  "+name+": a temp file left by an interrupted write") {
		t.Fatalf("state check after the writer was killed: %d\n%s", code, out)
	}
	// The lock repair takes sweeps it first.
	if code, out, errs = runCLI(t, "state", "repair", "--state-dir", st); code != 0 {
		t.Fatalf("state repair after the writer was killed: %d\n%s%s", code, out, errs)
	}
	if _, err := os.Lstat(w.Temp); err == nil {
		t.Fatalf("%s survived state repair", name)
	}
}
