//go:build faults

package crashtest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
)

// fileManifest is a File at p with inline content.
func fileManifest(name, p, content string) string {
	return fmt.Sprintf("---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: %s}\nspec:\n  path: %s\n  content: %q\n", name, p, content)
}

// injected counts the faults the suite injected and recovered from; it is
// logged at the end of each test.
var injected, recovered atomic.Int64

// underFault runs a sync while a fault holds and checks what the issue
// asks: it fails (exit 1) with a plain error matching want (no Go stack
// trace, no bare exit status); the host keeps its last good state (every
// file as before, or as desired, never torn, no temp file left); the
// snapshot loads. Then clear lifts the fault, and the next sync converges
// by itself.
func (s *sandbox) underFault(t *testing.T, want string, desired map[string]string, clear func(), extra ...string) {
	t.Helper()
	injected.Add(1)
	before, err := regularFiles(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, out := s.run("sync", extra...)
	took := time.Since(start)
	if code != 1 {
		t.Fatalf("under the fault sync exited %d, want 1:\n%s", code, out)
	}
	if !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("under the fault the error does not say %q:\n%s", want, out)
	}
	for _, bad := range []string{"goroutine ", "panic:", "exit status"} {
		if strings.Contains(out, bad) {
			t.Errorf("under the fault the output holds %q:\n%s", bad, out)
		}
	}
	t.Logf("under the fault (%s):\n%s", took.Round(time.Millisecond), indent(tail(out, 6)))
	after, err := regularFiles(s.Root)
	if err != nil {
		t.Fatal(err)
	}
	for p, h := range after {
		if h != before[p] && h != desired[p] {
			t.Errorf("under the fault %s became neither what it was nor what is desired", p)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			if _, want := desired[p]; want {
				t.Errorf("under the fault %s was lost", p)
			}
		}
	}
	if left := append(temps(s.Root), temps(s.State)...); len(left) > 0 {
		t.Errorf("temp files left by the failed sync: %v", left)
	}
	if _, err := s.loads(); err != nil {
		t.Errorf("under the fault the state no longer loads: %v", err)
	}
	clear()
	s.mustRun("sync", extra...)
	if err := s.converged(); err != nil {
		t.Fatal(err)
	}
	files, _ := regularFiles(s.Root)
	for p, h := range desired {
		if files[p] != h {
			t.Errorf("after the fault cleared %s is not the desired content", p)
		}
	}
	if t.Failed() {
		return
	}
	recovered.Add(1)
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }

func hashes(files map[string]string) map[string]string {
	out := map[string]string{}
	for p, c := range files {
		out[p] = sum([]byte(c))
	}
	return out
}

// mount runs mount(8) and undoes it when the test ends; ok is false (and
// why says why) when this host does not let it.
func mount(t *testing.T, args ...string) (why string, ok bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		return "not root: cannot mount", false
	}
	out, err := exec.Command("mount", args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("mount %s: %v: %s", strings.Join(args, " "), err, out), false
	}
	target := args[len(args)-1]
	t.Cleanup(func() { exec.Command("umount", "-l", target).Run() })
	return "", true
}

func mustMount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFaultDiskFull(t *testing.T) {
	s := newSandbox(t)
	srv := filepath.Join(s.Root, "srv")
	os.MkdirAll(srv, 0o755)
	if why, ok := mount(t, "-t", "tmpfs", "-o", "size=1m", "tmpfs", srv); !ok {
		t.Skip("no small tmpfs for a full disk: " + why)
	}
	big := strings.Repeat("0123456789abcdef", 128<<10) // 2 MiB
	v1 := map[string]string{"/srv/data/small": "small v1\n"}
	writeTree(t, filepath.Join(s.work, "v1"), map[string]string{"m.yaml": fileManifest("small", "/srv/data/small", v1["/srv/data/small"])})
	s.point(filepath.Join(s.work, "v1"))
	s.mustRun("sync")
	v2 := map[string]string{"/srv/data/small": "small v2\n", "/srv/data/big": big}
	writeTree(t, filepath.Join(s.work, "v2"), map[string]string{
		"m.yaml": fileManifest("small", "/srv/data/small", v2["/srv/data/small"]) +
			"---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: big}\nspec: {path: /srv/data/big, source: big.bin}\n",
		"big.bin": big,
	})
	s.point(filepath.Join(s.work, "v2"))
	s.underFault(t, `File/big: .*no space left on device`, hashes(v2), func() {
		mustMount(t, "-o", "remount,size=16m", srv)
	})
}

// TestFaultMirrorDiskFull fills the disk in the middle of a mirror's batch
// of temp files: none may be left, and the files already there stay whole.
func TestFaultMirrorDiskFull(t *testing.T) {
	s := newSandbox(t)
	srv := filepath.Join(s.Root, "srv")
	os.MkdirAll(srv, 0o755)
	if why, ok := mount(t, "-t", "tmpfs", "-o", "size=1m", "tmpfs", srv); !ok {
		t.Skip("no small tmpfs for a full disk: " + why)
	}
	tree := func(n int, v string) (map[string]string, map[string]string) {
		repo := map[string]string{"kb.yaml": "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n"}
		host := map[string]string{}
		for i := range n {
			c := strings.Repeat(fmt.Sprintf("%s %d\n", v, i), 4000) // about 32 KiB
			repo[fmt.Sprintf("kb/f%02d", i)] = c
			host[fmt.Sprintf("/srv/kb/f%02d", i)] = c
		}
		return repo, host
	}
	r1, _ := tree(8, "v1")
	writeTree(t, filepath.Join(s.work, "v1"), r1)
	s.point(filepath.Join(s.work, "v1"))
	s.mustRun("sync")
	r2, h2 := tree(40, "v2") // 1.3 MiB: does not fit
	writeTree(t, filepath.Join(s.work, "v2"), r2)
	s.point(filepath.Join(s.work, "v2"))
	s.underFault(t, `Directory/kb: .*no space left on device`, hashes(h2), func() {
		mustMount(t, "-o", "remount,size=16m", srv)
	})
}

func TestFaultStateDiskFull(t *testing.T) {
	s := newSandbox(t)
	os.MkdirAll(s.State, 0o700)
	if why, ok := mount(t, "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", s.State); !ok {
		t.Skip("no small tmpfs for a full state dir: " + why)
	}
	writeTree(t, filepath.Join(s.work, "v1"), map[string]string{"m.yaml": fileManifest("a", "/etc/a", "a v1\n")})
	s.point(filepath.Join(s.work, "v1"))
	s.mustRun("sync")
	want := map[string]string{"/etc/a": "a v2\n", "/etc/b": "b\n"}
	writeTree(t, filepath.Join(s.work, "v2"), map[string]string{"m.yaml": fileManifest("a", "/etc/a", want["/etc/a"]) + fileManifest("b", "/etc/b", want["/etc/b"])})
	s.point(filepath.Join(s.work, "v2"))
	filler := filepath.Join(s.State, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k", "count=1000").Run() // fills it, then fails
	s.underFault(t, `(save snapshot|state).*no space left on device`, hashes(want), func() {
		os.Remove(filler)
	})
}

func TestFaultReadOnly(t *testing.T) {
	s := newSandbox(t)
	etc := filepath.Join(s.Root, "etc", "app")
	v1 := map[string]string{"/etc/app/config": "v1\n"}
	writeTree(t, filepath.Join(s.work, "v1"), map[string]string{"m.yaml": fileManifest("config", "/etc/app/config", v1["/etc/app/config"])})
	s.point(filepath.Join(s.work, "v1"))
	s.mustRun("sync")
	var clear func()
	if _, ok := mount(t, "--bind", etc, etc); ok {
		mustMount(t, "-o", "remount,bind,ro", etc)
		clear = func() { mustMount(t, "-o", "remount,bind,rw", etc) }
	} else if out, err := exec.Command("chattr", "+i", etc).CombinedOutput(); err == nil {
		clear = func() { exec.Command("chattr", "-i", etc).Run() }
		t.Cleanup(clear)
	} else {
		t.Skipf("neither a read-only bind mount nor chattr +i works here: %v %s", err, out)
	}
	want := map[string]string{"/etc/app/config": "v2\n"}
	writeTree(t, filepath.Join(s.work, "v2"), map[string]string{"m.yaml": fileManifest("config", "/etc/app/config", want["/etc/app/config"])})
	s.point(filepath.Join(s.work, "v2"))
	s.underFault(t, `File/config: .*(read-only file system|operation not permitted)`, hashes(want), clear)
}

func TestFaultPermissionDenied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot run cortex-sync as another user")
	}
	s := newSandbox(t)
	const nobody = 65534
	// nobody must reach the binary and the sandbox.
	for d := filepath.Dir(bin); d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	for d := s.work; d != "/"; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o005 != 0o005 {
			os.Chmod(d, fi.Mode().Perm()|0o755)
		}
	}
	os.MkdirAll(filepath.Join(s.Root, "etc", "app"), 0o755) // root's own
	os.MkdirAll(filepath.Join(s.Root, "srv"), 0o755)
	os.Chown(filepath.Join(s.Root, "srv"), nobody, nobody)
	os.MkdirAll(s.State, 0o700)
	os.Chown(s.State, nobody, nobody)
	s.cred = &syscall.Credential{Uid: nobody, Gid: nobody}
	v1 := map[string]string{"/srv/ok": "fine\n"}
	writeTree(t, filepath.Join(s.work, "v1"), map[string]string{"m.yaml": fileManifest("ok", "/srv/ok", v1["/srv/ok"])})
	s.point(filepath.Join(s.work, "v1"))
	s.mustRun("sync")
	want := map[string]string{"/srv/ok": "fine\n", "/etc/app/config": "needs root\n"}
	writeTree(t, filepath.Join(s.work, "v2"), map[string]string{"m.yaml": fileManifest("ok", "/srv/ok", want["/srv/ok"]) + fileManifest("config", "/etc/app/config", want["/etc/app/config"])})
	s.point(filepath.Join(s.work, "v2"))
	s.underFault(t, `File/config: .*permission denied`, hashes(want), func() {
		os.Chown(filepath.Join(s.Root, "etc", "app"), nobody, nobody)
	})
}

func TestFaultParentIsAFile(t *testing.T) {
	s := newSandbox(t)
	want := map[string]string{"/etc/app/config": "v1\n"}
	writeTree(t, filepath.Join(s.work, "v1"), map[string]string{"m.yaml": fileManifest("config", "/etc/app/config", want["/etc/app/config"])})
	s.point(filepath.Join(s.work, "v1"))
	s.mustRun("sync")
	app := filepath.Join(s.Root, "etc", "app")
	os.RemoveAll(app)
	write(t, app, "a user's file where the directory was\n")
	// The user's file stays (underFault checks it is as it was): it is no
	// one's to delete; the user moves it away, and the sync recovers.
	s.underFault(t, `File/config: .*not a directory`, hashes(want), func() {
		if data, _ := os.ReadFile(app); string(data) != "a user's file where the directory was\n" {
			t.Errorf("the user's file in the way was changed: %q", data)
		}
		os.Remove(app)
	})
}

func TestFaultDirectoryBecameSymlink(t *testing.T) {
	s := newSandbox(t)
	kb := map[string]string{"kb.yaml": "apiVersion: cortex-sync/v1alpha1\nkind: Directory\nmetadata: {name: kb}\nspec: {path: /srv/kb, source: kb}\n", "kb/a.md": "a\n", "kb/b.md": "b\n"}
	writeTree(t, filepath.Join(s.work, "v1"), kb)
	s.point(filepath.Join(s.work, "v1"))
	s.mustRun("sync")
	// The managed directory is replaced by a symlink elsewhere: inside the
	// root, and (resolved in the root all the same) to the real /etc.
	for _, target := range []string{"/elsewhere", "../../elsewhere", "/etc"} {
		t.Run(strings.ReplaceAll(target, "/", "_"), func(t *testing.T) {
			injected.Add(1)
			elsewhere := filepath.Join(s.Root, "elsewhere")
			write(t, filepath.Join(elsewhere, "keep.txt"), "someone else's\n")
			dir := filepath.Join(s.Root, "srv", "kb")
			os.RemoveAll(dir)
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
			before, _ := regularFiles(elsewhere)
			code, out := s.run("sync")
			t.Logf("sync exited %d:\n%s", code, indent(tail(out, 6)))
			if after, _ := regularFiles(elsewhere); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("sync wrote through the symlink: %v, was %v", after, before)
			}
			if code != 0 {
				os.Remove(dir)
				s.mustRun("sync")
			}
			if err := s.converged(); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
				t.Fatalf("/srv/kb is not a directory again: %v %v", fi, err)
			}
			recovered.Add(1)
		})
	}
}

// gitServer serves a repository over smart HTTP on a fixed port, and can
// be down, slow, or answer garbage.
type gitServer struct {
	t    *testing.T
	repo *gittest.Repo
	addr string
	mode atomic.Value // "ok", "slow", "garbage"
	srv  *http.Server
}

func newGitServer(t *testing.T, repo *gittest.Repo) *gitServer {
	g := &gitServer{t: t, repo: repo}
	g.mode.Store("ok")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.addr = l.Addr().String()
	g.serve(l)
	t.Cleanup(g.stop)
	return g
}

func (g *gitServer) URL() string { return "http://" + g.addr + "/" + g.repo.Name }

func (g *gitServer) serve(l net.Listener) {
	backend := &cgi.Handler{
		Path: filepath.Join(g.repo.Git("--exec-path"), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + g.repo.Base, "GIT_HTTP_EXPORT_ALL=1"},
	}
	g.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch g.mode.Load() {
		case "slow":
			select { // until the client gives up, or a minute
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
			return
		case "garbage":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintln(w, "<html><body>502 Bad Gateway, or a captive portal</body></html>")
			return
		}
		backend.ServeHTTP(w, r)
	})}
	go g.srv.Serve(l)
}

func (g *gitServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	g.srv.Shutdown(ctx)
	g.srv.Close()
}

// restart listens again on the same port.
func (g *gitServer) restart() {
	var l net.Listener
	var err error
	for range 50 {
		if l, err = net.Listen("tcp", g.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		g.t.Fatalf("listen again on %s: %v", g.addr, err)
	}
	g.serve(l)
}

func TestFaultGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	repo := gittest.NewRepo(t)
	content := func(v string) map[string]*string {
		return map[string]*string{"m.yaml": gittest.S(fileManifest("config", "/etc/app/config", v))}
	}
	repo.Commit("v1", content("v1\n"))
	g := newGitServer(t, repo)
	s := newSandbox(t)
	s.src = []string{"--repo", g.URL(), "--branch", "main", "--fetch-timeout", "3s"}
	s.mustRun("sync")
	want := func(v string) map[string]string { return hashes(map[string]string{"/etc/app/config": v}) }
	version := 1
	next := func() map[string]string {
		version++
		v := fmt.Sprintf("v%d\n", version)
		repo.Commit(v, content(v))
		return want(v)
	}

	t.Run("down", func(t *testing.T) {
		d := next()
		g.stop()
		s.underFault(t, `connection refused`, d, g.restart)
	})
	t.Run("slow", func(t *testing.T) {
		d := next()
		g.mode.Store("slow")
		start := time.Now()
		s.underFault(t, `(timeout|deadline|timed out)`, d, func() {
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("a 3s fetch timeout took %s to give up", took)
			}
			g.mode.Store("ok")
		})
	})
	t.Run("garbage", func(t *testing.T) {
		d := next()
		g.mode.Store("garbage")
		s.underFault(t, `fetch|reference|repository|protocol|unexpected|invalid`, d, func() { g.mode.Store("ok") })
	})
	t.Run("force-pushed", func(t *testing.T) {
		injected.Add(1)
		next()
		s.mustRun("sync")
		// History rewritten: main no longer contains what was applied.
		repo.Git("-C", repo.Dir, "reset", "-q", "--hard", "HEAD~2")
		d := next()
		code, out := s.run("sync")
		t.Logf("after a force push sync exited %d:\n%s", code, indent(tail(out, 4)))
		if code != 0 {
			t.Fatalf("a force-pushed branch is not followed")
		}
		if err := s.converged(); err != nil {
			t.Fatal(err)
		}
		if files, _ := regularFiles(s.Root); files["/etc/app/config"] != d["/etc/app/config"] {
			t.Fatal("not at the force-pushed tip")
		}
		recovered.Add(1)
	})
	t.Run("deleted", func(t *testing.T) {
		d := next()
		moved := repo.Dir + ".away"
		if err := os.Rename(repo.Dir, moved); err != nil {
			t.Fatal(err)
		}
		s.underFault(t, `(not found|repository)`, d, func() { os.Rename(moved, repo.Dir) })
	})
}

// TestFaultGitCacheDiskFull fills the disk the Git cache is on while a
// fetch writes its pack: the fetch must fail at once saying so, over every
// transport, not wait out the fetch timeout and blame the server (issue 18
// §8: over file://, go-git waited for a server that could not finish
// sending once the pack writer stopped reading).
func TestFaultGitCacheDiskFull(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	transports := map[string]func(t *testing.T, repo *gittest.Repo) []string{
		"http": func(t *testing.T, repo *gittest.Repo) []string {
			return []string{"--repo", newGitServer(t, repo).URL()}
		},
		"git": func(t *testing.T, repo *gittest.Repo) []string {
			url, _ := repo.Daemon(t)
			return []string{"--repo", url}
		},
		"file": func(t *testing.T, repo *gittest.Repo) []string { return []string{"--repo", "file://" + repo.Dir} },
		"ssh": func(t *testing.T, repo *gittest.Repo) []string {
			srv := repo.SSHD(t)
			return []string{"--repo", srv.URL, "--ssh-key-file", srv.KeyFile, "--known-hosts-file", srv.KnownHosts}
		},
	}
	for name, serve := range transports {
		t.Run(name, func(t *testing.T) {
			repo := gittest.NewRepo(t)
			repo.Commit("v1", map[string]*string{"m.yaml": gittest.S(fileManifest("config", "/etc/app/config", "v1\n"))})
			s := newSandbox(t)
			cache := filepath.Join(s.State, "cache")
			if err := os.MkdirAll(cache, 0o700); err != nil {
				t.Fatal(err)
			}
			if why, ok := mount(t, "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", cache); !ok {
				t.Skip("no small tmpfs for a full Git cache: " + why)
			}
			// The default timeout: a fetch that waits it out fails the test
			// by its message, a minute later.
			s.src = append(serve(t, repo), "--branch", "main", "--fetch-timeout", "60s")
			s.mustRun("sync")
			// 3 MiB that do not compress: the pack does not fit.
			big := make([]byte, 3<<20)
			rand.NewChaCha8([32]byte{1}).Read(big)
			want := map[string]string{"/etc/app/config": "v2\n", "/srv/big.bin": string(big)}
			repo.Commit("v2", map[string]*string{
				"m.yaml":  gittest.S(fileManifest("config", "/etc/app/config", want["/etc/app/config"]) + "---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: big}\nspec: {path: /srv/big.bin, source: big.bin}\n"),
				"big.bin": gittest.S(string(big)),
			})
			// The agent says so on /readyz.
			s.agentSays(t, "no space left on device")
			s.underFault(t, `no space left on device \(the disk of the Git cache, .*, is full: free space there\)`, hashes(want), func() {
				mustMount(t, "-o", "remount,size=64m", cache)
			})
		})
	}
}

// agentSays starts the agent and waits (30 s at most: the fetch timeout is
// a minute) for /readyz to answer 503 with want in its body; then it stops
// the agent.
func (s *sandbox) agentSays(t *testing.T, want string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := s.command("run", "--listen", addr, "--interval", "1s")
	var out strings.Builder // read once the agent has ended
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	client := &http.Client{Timeout: time.Second}
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), want) {
			t.Logf("the agent: /readyz %s", strings.TrimSpace(last))
			stop()
			return
		}
	}
	stop()
	t.Fatalf("the agent's /readyz never said %q (last: %s); its log:\n%s", want, last, out.String())
}

// TestFaultTally runs last (tests run in file order) and reports the count
// for docs/reliability.md.
func TestFaultTally(t *testing.T) {
	t.Logf("faults: %d injected, %d recovered", injected.Load(), recovered.Load())
	if injected.Load() != recovered.Load() {
		t.Errorf("%d faults were not recovered from", injected.Load()-recovered.Load())
	}
}
