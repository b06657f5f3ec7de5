package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

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

// TestPackagedToken: the package turns the control API's token on. The
// packaged config names /etc/cortex-sync/token, and postinstall makes it
// once (0600, 32 random bytes in hex), keeps it on upgrade, and a purge
// removes it. Run under $DPKG_ROOT, as dpkg does for a root not its own.
func TestPackagedToken(t *testing.T) {
	data, err := os.ReadFile(repoRoot + "/packaging/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := yamlDocs(data)
	if err != nil || len(docs) != 1 {
		t.Fatalf("packaging/agent.yaml: %d documents, %v", len(docs), err)
	}
	spec, _ := docs[0].(map[string]any)["spec"].(map[string]any)
	if spec["tokenFile"] != "/etc/cortex-sync/token" {
		t.Errorf("packaging/agent.yaml: tokenFile %v, want /etc/cortex-sync/token", spec["tokenFile"])
	}

	root := t.TempDir()
	script := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command("sh", append([]string{repoRoot + "/packaging/scripts/" + name}, args...)...)
		cmd.Env = append(os.Environ(), "DPKG_ROOT="+root)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	token := filepath.Join(root, "etc/cortex-sync/token")
	script("postinstall.sh", "configure", "")
	fi, err := os.Stat(token)
	if err != nil {
		t.Fatalf("no token after install: %v", err)
	}
	first, _ := os.ReadFile(token)
	if fi.Mode().Perm() != 0o600 || !regexp.MustCompile(`^[0-9a-f]{64}\n$`).Match(first) {
		t.Errorf("token: mode %v, %d bytes %q; want 0600, 64 hex digits and a newline", fi.Mode().Perm(), len(first), first)
	}
	if fi, err := os.Stat(filepath.Join(root, "var/lib/cortex-sync")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state dir after install: %v %v", fi, err)
	}
	script("postinstall.sh", "configure", "1.4.0") // an upgrade
	if again, _ := os.ReadFile(token); string(again) != string(first) {
		t.Error("an upgrade replaced the token")
	}
	other := t.TempDir()
	root = other
	script("postinstall.sh", "configure", "")
	if second, _ := os.ReadFile(filepath.Join(other, "etc/cortex-sync/token")); string(second) == string(first) || len(second) != 65 {
		t.Errorf("a second install's token %q", second)
	}
	script("postremove.sh", "remove")
	if _, err := os.Stat(filepath.Join(other, "etc/cortex-sync/token")); err != nil {
		t.Errorf("remove (not purge) took the token: %v", err)
	}
	script("postremove.sh", "purge")
	if _, err := os.Stat(filepath.Join(other, "etc/cortex-sync/token")); !os.IsNotExist(err) {
		t.Errorf("purge left the token: %v", err)
	}
}

// TestCheckDebStamp: the stamp check-deb.sh asks of the packaged binary
// matches what a release binary prints (version.go), as install.md shows.
func TestCheckDebStamp(t *testing.T) {
	data, err := os.ReadFile(repoRoot + "/packaging/check-deb.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^echo "\$version" \| grep -q "([^"]+)" && ok "stamped`).FindSubmatch(data)
	if m == nil {
		t.Fatal("check-deb.sh has no stamp check (echo \"$version\" | grep -q \"…\" && ok \"stamped…)")
	}
	release := buildInfo{Version: "1.4.0", Commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904", Date: "2026-03-02T00:00:00Z"}.String()
	local := buildInfo{Version: "0.0.0~local", Commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904", Date: "2026-03-02T00:00:00Z", Modified: true}.String()
	for line, want := range map[string]bool{release: true, local: true, "cortex-sync (devel) go1.26.0 linux/amd64": false} {
		err := exec.Command("sh", "-c", `echo "$1" | grep -q "$2"`, "sh", line, string(m[1])).Run()
		if got := err == nil; got != want {
			t.Errorf("check-deb.sh's stamp check %q on %q: %v, want %v", m[1], line, got, want)
		}
	}
}

// TestNfpmConfig: packaging/nfpm.yaml, the fast local package check's
// (make package-check), packs what .goreleaser.yaml's nfpms entry packs,
// the binary aside: the same files, modes, types, scripts and metadata.
func TestNfpmConfig(t *testing.T) {
	type content struct {
		Src, Dst, Type string
		FileInfo       struct{ Mode int } `yaml:"file_info"`
	}
	type pkg struct {
		Name        string `yaml:"name"`
		PackageName string `yaml:"package_name"`
		Vendor      string
		Homepage    string
		Maintainer  string
		Description string
		Section     string
		Priority    string
		Recommends  []string
		Contents    []content
		Scripts     map[string]string
	}
	var gr struct{ Nfpms []pkg }
	var nf pkg
	for file, v := range map[string]any{"/.goreleaser.yaml": &gr, "/packaging/nfpm.yaml": &nf} {
		data, err := os.ReadFile(repoRoot + file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if len(gr.Nfpms) != 1 {
		t.Fatalf(".goreleaser.yaml: %d nfpms entries, want 1", len(gr.Nfpms))
	}
	want := gr.Nfpms[0]
	want.Name, want.PackageName = want.PackageName, ""
	var bin []content
	nf.Contents = slices.DeleteFunc(nf.Contents, func(c content) bool {
		if c.Dst == "/usr/bin/cortex-sync" {
			bin = append(bin, c)
			return true
		}
		return false
	})
	if len(bin) != 1 || bin[0].FileInfo.Mode != 0o755 {
		t.Errorf("nfpm.yaml packs the binary as %+v, want one /usr/bin/cortex-sync, mode 0755", bin)
	}
	if !reflect.DeepEqual(nf, want) {
		t.Errorf("packaging/nfpm.yaml differs from .goreleaser.yaml's nfpms:\n%+v\nwant\n%+v", nf, want)
	}
}
