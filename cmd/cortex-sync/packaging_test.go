package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

const unitFile = repoRoot + "/packaging/systemd/cortex-sync.service"

// TestSystemdUnit checks the service's contract and, where
// systemd-analyze is installed, that systemd accepts the unit.
func TestSystemdUnit(t *testing.T) {
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(data)
	for _, want := range []string{
		"ExecStart=/usr/bin/cortex-sync run --config /etc/cortex-sync/agent.yaml",
		"Restart=always",
		"KillMode=process", // supervised processes outlive an agent restart or upgrade
		"Delegate=yes",
		"ExecReload=/bin/kill -HUP $MAINPID",
		"StateDirectory=cortex-sync",
		"StateDirectoryMode=0700",
	} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).MatchString(unit) {
			t.Errorf("the unit has no line %q", want)
		}
	}
	// It manages arbitrary host paths, and its children inherit its sandbox.
	for _, never := range []string{"ProtectSystem", "ProtectHome", "PrivateTmp", "NoNewPrivileges", "ReadOnlyPaths", "RestrictSUIDSGID"} {
		if regexp.MustCompile(`(?m)^` + never + `=`).MatchString(unit) {
			t.Errorf("the unit sets %s, which would stop cortex-sync or what it runs from managing the host", never)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install -y systemd): unit not verified")
	}
	// verify checks that ExecStart's binary exists: point it at this test
	// binary, an executable that surely does.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copyUnit := filepath.Join(t.TempDir(), "cortex-sync.service")
	if err := os.WriteFile(copyUnit, []byte(strings.Replace(unit, "ExecStart=/usr/bin/cortex-sync ", "ExecStart="+exe+" ", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// --man=no: the Documentation= man page is installed only by the package.
	out, err := exec.Command(analyze, "verify", "--man=no", copyUnit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestPackagedConfig: the default /etc/cortex-sync/agent.yaml is an Agent
// file with no source set, so a fresh install syncs nothing until told.
func TestPackagedConfig(t *testing.T) {
	data, err := os.ReadFile(repoRoot + "/packaging/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := yamlDocs(data)
	if err != nil || len(docs) != 1 {
		t.Fatalf("packaging/agent.yaml: %d documents, %v", len(docs), err)
	}
	m := docs[0].(map[string]any)
	spec, _ := m["spec"].(map[string]any)
	if m["apiVersion"] != resource.APIVersion || m["kind"] != "Agent" || spec == nil {
		t.Fatalf("packaging/agent.yaml is not an Agent file: %v", m)
	}
	for _, f := range []string{"repo", "dir"} {
		if _, set := spec[f]; set {
			t.Errorf("packaging/agent.yaml sets %s: a fresh install must not sync until configured", f)
		}
	}
}
