package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-03-01T10:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	for _, tc := range []struct {
		name    string
		stamped buildInfo
		info    debug.BuildInfo
		want    string
	}{
		{"go install", buildInfo{}, debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "cortex-sync v1.4.0 go"},
		{"plain go build", buildInfo{}, debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "cortex-sync (devel) go"},
		{"build in a checkout", buildInfo{}, debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"cortex-sync (devel) (commit 0123456789ab-dirty, committed 2026-03-01T10:00:00Z) go"},
		{"release", buildInfo{Version: "1.4.0", Commit: "fedcba9876543210", Date: "2026-03-02T00:00:00Z"},
			debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			"cortex-sync 1.4.0 (commit fedcba987654, committed 2026-03-02T00:00:00Z) go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fromBuildInfo(tc.stamped, &tc.info)
			if tc.stamped.Commit != "" {
				b.Modified = false // the release stamp wins over a dirty build tree
			}
			if got := b.String(); !strings.HasPrefix(got, tc.want) {
				t.Errorf("got %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

// TestVersionFlag: --version and the version command print the same line.
func TestVersionFlag(t *testing.T) {
	var a, b, errs bytes.Buffer
	if code := run(context.Background(), []string{"version"}, nil, &a, &errs); code != 0 {
		t.Fatalf("version: exit %d: %s", code, errs.String())
	}
	if code := run(context.Background(), []string{"--version"}, nil, &b, &errs); code != 0 {
		t.Fatalf("--version: exit %d: %s", code, errs.String())
	}
	if a.String() != b.String() || !strings.HasPrefix(a.String(), "cortex-sync ") {
		t.Errorf("version printed %q, --version %q", a.String(), b.String())
	}
}

// TestMakeBuildStampsCommit: `make build` in a Git checkout gives a binary
// that names its commit, and says whether the tree it was built from had
// changes, whatever Go's own VCS stamping does (GOFLAGS=-buildvcs=false,
// or a linked worktree, where Go records nothing).
func TestMakeBuildStampsCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " is not installed")
		}
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not in a Git checkout")
	}
	dir := strings.TrimSpace(string(top))
	head, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	status, err := exec.Command("git", "-C", dir, "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "cortex-sync")
	mk := exec.Command("make", "-s", "-C", dir, "build", "BIN="+bin)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "(commit " + string(head[:12])
	if len(status) > 0 {
		want += "-dirty"
	}
	want += ", committed "
	if !strings.Contains(string(out), want) {
		t.Errorf("make build's binary prints %q, want it to contain %q", out, want)
	}
}
