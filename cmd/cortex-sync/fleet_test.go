package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// runCLI runs the command in-process, as main does.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func joinHost(t *testing.T, endpoints []string, name string) *fleet.Member {
	t.Helper()
	c, err := fleet.Dial(fleet.Config{Endpoints: endpoints, Fleet: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := fleet.Join(c, fleet.MemberConfig{Host: resource.Host{Name: name}, PresenceTTL: 2 * time.Second, Debounce: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for end := time.Now().Add(10 * time.Second); !m.Present(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s not present", name)
		}
	}
	return m
}

// eventually runs the command until its exit code is want.
func eventually(t *testing.T, want int, args ...string) (stdout, stderr string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, out, errs := runCLI(t, args...)
		if code == want {
			return out, errs
		}
		if time.Now().After(end) {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, want, out, errs)
		}
	}
}

func TestFleetCLI(t *testing.T) {
	cl := etcdtest.New(t)
	eps := strings.Join(cl.Endpoints(), ",")
	etcd := []string{"--etcd-endpoints", eps, "--fleet", "prod"}
	cli := func(args ...string) []string { return append(args, etcd...) }
	h1, h2 := joinHost(t, cl.Endpoints(), "h1"), joinHost(t, cl.Endpoints(), "h2")
	head := "main@sha1:" + strings.Repeat("a", 40)
	good := fleet.HostStatus{Revision: head, Head: head, HeadTime: time.Now(), Sync: "Synced", Health: "Healthy", LastGood: head}
	h1.SetStatus(good)
	h2.SetStatus(good)

	out, _ := eventually(t, 0, cli("fleet", "status")...)
	for _, re := range []string{`(?m)^Head: +main@sha1:a{40}$`, `(?m)^State: +converged`, `(?m)^h1 +main@sha1:aaaaaaaaaaaa +Synced +Healthy +yes `, `(?m)^main@sha1:aaaaaaaaaaaa +2 +2 +2 +0$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("fleet status does not match %s:\n%s", re, out)
		}
	}
	bad := good
	bad.Health, bad.LastError = "Degraded", "Process/web: readiness failed"
	h2.SetStatus(bad)
	out, _ = eventually(t, 1, cli("fleet", "status")...)
	if !strings.Contains(out, "Process/web: readiness failed") {
		t.Errorf("the degraded host's error is not shown:\n%s", out)
	}
	code, out, _ := runCLI(t, cli("fleet", "status", "-o", "json")...)
	var r fleet.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 1 || r.Converged || len(r.Hosts) != 2 || r.Hosts[1].Health != "Degraded" {
		t.Fatalf("-o json: exit %d %v %+v", code, err, r)
	}
	// The JSON says what the text's "yes" says: on its last good revision.
	if !strings.Contains(out, `"onLastGood": true`) || !strings.Contains(out, `"behindHead": false`) {
		t.Errorf("-o json of hosts on their last good head:\n%s", out)
	}

	// hold and release, by name.
	if code, out, errs := runCLI(t, cli("hold", "h1", "--reason", "disk swap")...); code != 0 || !strings.Contains(out, "h1: held in fleet prod") {
		t.Fatalf("hold: %d %s %s", code, out, errs)
	}
	rev := fleet.Revision{ID: "main@sha1:" + strings.Repeat("b", 40), Rollout: resource.Rollout{Canary: 1}}
	if d, err := h1.Admit(context.Background(), rev); err != nil || d.Go || !strings.Contains(d.Why, "(disk swap)") {
		t.Fatalf("held host admitted: %+v %v", d, err)
	}
	if code, out, _ := runCLI(t, cli("release", "h1")...); code != 0 || !strings.Contains(out, "h1: released") {
		t.Fatalf("release: %d %s", code, out)
	}
	if d, err := h1.Admit(context.Background(), rev); err != nil || !d.Go {
		t.Fatalf("released host: %+v %v", d, err)
	}

	// The rollout: status, pause, resume.
	code, out, _ = runCLI(t, cli("fleet", "rollout", "status")...)
	if code != 0 || !strings.Contains(out, "Rollout of main@sha1:bbbbbbbbbbbb: canary") || !strings.Contains(out, "applying: h1;") {
		t.Fatalf("rollout status: %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, cli("fleet", "rollout", "pause", "--reason", "error rate")...); code != 0 || out != "rollout of "+rev.ID+": paused\n" {
		t.Fatalf("pause: %d %q", code, out)
	}
	if d, _ := h2.Admit(context.Background(), rev); d.Go || !strings.Contains(d.Why, "(error rate)") {
		t.Fatalf("admitted while paused: %+v", d)
	}
	code, out, _ = runCLI(t, cli("fleet", "rollout", "status", "-o", "json")...)
	if code != 0 || !strings.Contains(out, `"state": "paused"`) {
		t.Fatalf("rollout status -o json: %d\n%s", code, out)
	}
	if code, out, _ := runCLI(t, cli("fleet", "rollout", "resume")...); code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: %d %s", code, out)
	}

	// etcd down: status cannot be determined, exit 2, saying why.
	cl.StopAll()
	code, out, errs := runCLI(t, cli("fleet", "status")...)
	if code != 2 || out != "" || !strings.Contains(errs, "coordinator unreachable since ") {
		t.Fatalf("fleet status with etcd down: exit %d\n%s%s", code, out, errs)
	}
}

func TestFleetCLIUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"fleet", "status", "--fleet", "prod"}, "no etcd endpoints: give --etcd-endpoints"},
		{[]string{"fleet", "status", "--etcd-endpoints", "http://127.0.0.1:1"}, "--fleet: name the fleet"},
		{[]string{"fleet", "status", "--etcd-endpoints", "127.0.0.1:2379", "--fleet", "prod"}, `etcd endpoint "127.0.0.1:2379": write a client URL`},
		{[]string{"hold", "--label", "role", "--local"}, `--label "role": write KEY=VALUE`},
	} {
		code, _, errs := runCLI(t, tt.args...)
		if code == 0 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: exit %d, %q, want %q", tt.args, code, errs, tt.want)
		}
	}
}

// etcdPut writes a raw value below fleet prod's prefix, as any member of
// the fleet can.
func etcdPut(t *testing.T, endpoints []string, key, value string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/cortex-sync/prod/"+key, value); err != nil {
		t.Fatal(err)
	}
}

// fleet status shows what hosts write capped and cleaned: a 1 MB host
// name made the HOST column 1 MB wide, and a value may carry escapes.
func TestFleetStatusCapsWhatHostsWrite(t *testing.T) {
	cl := etcdtest.New(t)
	etcd := []string{"--etcd-endpoints", strings.Join(cl.Endpoints(), ","), "--fleet", "prod"}
	h1 := joinHost(t, cl.Endpoints(), "h1")
	head := "main@sha1:" + strings.Repeat("a", 40)
	h1.SetStatus(fleet.HostStatus{Revision: head, Head: head, HeadTime: time.Now(), Sync: "Synced", Health: "Healthy"})
	huge := strings.Repeat("x", 600<<10) // twice that is as large as a request to etcd may be
	etcdPut(t, cl.Endpoints(), "status/"+huge, `{"host":"`+huge+`","revision":"r"}`)
	etcdPut(t, cl.Endpoints(), "status/h2", `{"host":"h2","revision":"main@sha1:`+strings.Repeat("b", 40)+`","sync":"Synced\u001b]0;owned\u0007","health":"`+strings.Repeat("H", 5000)+`","lastError":"line\nbreak \u001b[31mred`+strings.Repeat(" y", 20000)+`"}`)
	etcdPut(t, cl.Endpoints(), "singleton/db/1", "evil\x1b[2J")
	out, _ := eventually(t, 0, append([]string{"fleet", "status"}, etcd...)...) // h2 is stale: h1 alone is live
	if strings.ContainsAny(out, "\x1b\x07") || len(out) > 8<<10 {
		t.Fatalf("fleet status carries escapes, or is %d bytes:\n%.4000s", len(out), out)
	}
	for _, line := range strings.Split(out, "\n") {
		if len(line) > 1200 {
			t.Fatalf("a line of %d bytes: %.300s…", len(line), line)
		}
	}
	for _, want := range []string{"h2 ", "Synced?]0;owned?", strings.Repeat("H", 48) + "…", "line break ?[31mred y y", "Ignored:", "is 614400 bytes long; at most 253", "(a candidate whose record is not a host name)"} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet status lacks %q:\n%.4000s", want, out)
		}
	}
}

// resume never reports success for a rollout it cannot move: it exits
// non-zero, saying why.
func TestFleetRolloutResumeNothingToResume(t *testing.T) {
	cl := etcdtest.New(t)
	etcd := []string{"--etcd-endpoints", strings.Join(cl.Endpoints(), ","), "--fleet", "prod"}
	h1 := joinHost(t, cl.Endpoints(), "h1")
	rev := fleet.Revision{ID: "main@sha1:" + strings.Repeat("c", 40), Rollout: resource.Rollout{}}
	if d, err := h1.Admit(context.Background(), rev); err != nil || !d.Go {
		t.Fatalf("admit: %+v %v", d, err)
	}
	code, out, errs := runCLI(t, append([]string{"fleet", "rollout", "resume"}, etcd...)...)
	if code == 0 || out != "" || !strings.Contains(errs, "nothing to resume: the rollout of "+rev.ID+" in fleet prod is progressing, not paused or aborted, and no failure counts against it") {
		t.Fatalf("resume of a progressing rollout: exit %d\n%s%s", code, out, errs)
	}
	// A spec of a newer cortex-sync: this one cannot tell what resume would do.
	etcdPut(t, cl.Endpoints(), "rollout/main@sha1:"+strings.Repeat("d", 40)+"/spec", `{"schema":9,"revision":"main@sha1:`+strings.Repeat("d", 40)+`","rollout":{}}`)
	code, out, errs = runCLI(t, append([]string{"fleet", "rollout", "resume", "--revision", "main@sha1:" + strings.Repeat("d", 40)}, etcd...)...)
	if code == 0 || out != "" || !strings.Contains(errs, "written by a newer cortex-sync (schema 9; this one reads up to "+strconv.Itoa(fleet.Schema)+")") {
		t.Fatalf("resume of a rollout of a newer schema: exit %d\n%s%s", code, out, errs)
	}
}

// TestFleetStatusNamesASignatureRefusal: a host whose agent refuses the
// source's newest revision for its signature (here, unsigned) is shown so
// by fleet status, naming the commit and why, from the record the agent
// writes to etcd.
func TestFleetStatusNamesASignatureRefusal(t *testing.T) {
	cl := etcdtest.New(t)
	f := newSingletonFleet(t, cl.Endpoints())
	key := filepath.Join(t.TempDir(), "alice")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	signers := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(signers, append([]byte("t@example.com "), pub...), 0o644); err != nil {
		t.Fatal(err)
	}
	head, err := exec.Command("git", "-C", f.repo, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	commit := strings.TrimSpace(string(head))
	// The fleet is named: the one fleet.yaml this host has is in the
	// refused revision, which is not read.
	f.args = []string{"--verify-allowed-signers", signers, "--fleet", f.fleet}
	a := f.start("h1", nil)
	args := []string{"fleet", "status", "--etcd-endpoints", strings.Join(cl.Endpoints(), ","), "--fleet", f.fleet}
	want := regexp.MustCompile(`(?m)^h1 .*revision main@sha1:` + commit[:12] + `.* refused for its signature: commit ` + commit + ` is not signed`)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, out, errs := runCLI(t, args...)
		if code == 1 && want.MatchString(out) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("fleet status (exit %d) does not name the refusal:\n%s%s\nagent:\n%s", code, out, errs, a.stderr.String())
		}
	}
	if _, err := os.Stat(filepath.Join(a.root, "single")); err == nil {
		t.Error("something of the refused revision was applied")
	}
}

// TestFleetWindow: fleet status shows a host that waits for its deploy
// window (phase window, and when it opens), from what the host writes;
// override-window records the override a waiting host reads, and needs
// a revision.
func TestFleetWindow(t *testing.T) {
	cl := etcdtest.New(t)
	etcd := []string{"--etcd-endpoints", strings.Join(cl.Endpoints(), ","), "--fleet", "prod"}
	old, head := "main@sha1:"+strings.Repeat("a", 40), "main@sha1:"+strings.Repeat("b", 40)
	opens := time.Date(2026, 12, 7, 21, 0, 0, 0, time.UTC)
	night, day := joinHost(t, cl.Endpoints(), "night"), joinHost(t, cl.Endpoints(), "day")
	night.SetStatus(fleet.HostStatus{Revision: old, Head: head, HeadTime: opens.Add(-time.Hour), Sync: "Synced", Health: "Healthy", WindowOpens: opens})
	day.SetStatus(fleet.HostStatus{Revision: head, Head: head, HeadTime: opens.Add(-time.Hour), Sync: "Synced", Health: "Healthy"})
	var out string
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, out, _ = runCLI(t, append([]string{"fleet", "status"}, etcd...)...)
		if strings.Contains(out, "waits for its deploy window: opens 2026-12-07T21:00:00Z") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("fleet status does not show night's window:\n%s", out)
		}
	}
	if !regexp.MustCompile(`(?m)^night +main@sha1:a+ .* window `).MatchString(out) {
		t.Errorf("night's phase is not window:\n%s", out)
	}
	_, out, _ = runCLI(t, append([]string{"fleet", "status", "-o", "json"}, etcd...)...)
	for _, want := range []string{`"phase": "window"`, `"windowOpens": "2026-12-07T21:00:00Z"`} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet status -o json lacks %s:\n%s", want, out)
		}
	}

	c, err := fleet.Dial(fleet.Config{Endpoints: cl.Endpoints(), Fleet: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, err := c.WindowOverridden(context.Background(), head); ok || err != nil {
		t.Fatalf("overridden before override-window: %v %v", ok, err)
	}
	if code, _, errs := runCLI(t, append([]string{"fleet", "rollout", "override-window"}, etcd...)...); code == 0 || !strings.Contains(errs, "accepts 1 arg(s), received 0") {
		t.Fatalf("override-window without a revision: exit %d, %s", code, errs)
	}
	code, out, errs := runCLI(t, append([]string{"fleet", "rollout", "override-window", head, "--reason", "hotfix"}, etcd...)...)
	if code != 0 || out != "deploy windows overridden for "+head+": hosts take it at their next fetch\n" {
		t.Fatalf("override-window: exit %d\n%s%s", code, out, errs)
	}
	if ok, err := c.WindowOverridden(context.Background(), head); !ok || err != nil {
		t.Fatalf("not overridden after override-window: %v %v", ok, err)
	}
	if ok, _ := c.WindowOverridden(context.Background(), old); ok {
		t.Fatal("override-window of one revision overrode another")
	}
}
