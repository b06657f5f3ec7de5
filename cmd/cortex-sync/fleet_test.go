package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

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
