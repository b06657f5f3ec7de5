package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"cortex-sync": func() {
			if f := os.Getenv("CORTEX_SYNC_TEST_CLOCK"); f != "" {
				windowClock = fileClock(f)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
			stop()
			os.Exit(code)
		},
		"pids": pidsMain,
		"http": httpMain,
	})
}

// pidsMain prints the pid of each process of the script whose command
// line (its arguments joined by spaces) matches a regular expression, and
// exits 1 when none does: pgrep -f, without needing procps. A process is
// the script's when a variable of its environment is $WORK or a path
// under it, as those the script starts and those cortex-sync supervises
// for it (CORTEX_SYNC_ROOT) have; so another run of the same script, in
// parallel, is not counted.
//
//	pids PATTERN
func pidsMain() {
	work := os.Getenv("WORK")
	if len(os.Args) != 2 || work == "" {
		fmt.Fprintln(os.Stderr, "usage: pids PATTERN, in a script")
		os.Exit(2)
	}
	re, err := regexp.Compile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "pids:", err)
		os.Exit(2)
	}
	found := false
	for _, pid := range scriptPIDs(work, re) {
		fmt.Println(pid)
		found = true
	}
	if !found {
		os.Exit(1)
	}
}

// httpMain is a small HTTP client for scripts: it prints the status code
// on the first line, then the body; it fails only when nothing answers.
//
//	http METHOD URL [-d FILE] [-H 'Name: value']... [-github-secret FILE]
//
// -github-secret signs the body as GitHub does (X-Hub-Signature-256).
func httpMain() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: http METHOD URL [-d FILE] [-H 'Name: value']... [-github-secret FILE]")
		os.Exit(2)
	}
	var body []byte
	headers := http.Header{}
	secret := ""
	for i := 3; i+1 < len(os.Args); i += 2 {
		switch os.Args[i] {
		case "-d":
			b, err := os.ReadFile(os.Args[i+1])
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			body = b
		case "-H":
			k, v, _ := strings.Cut(os.Args[i+1], ":")
			headers.Add(k, strings.TrimSpace(v))
		case "-github-secret":
			b, err := os.ReadFile(os.Args[i+1])
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			secret = strings.TrimSpace(string(b))
		}
	}
	if secret != "" {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		headers.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	}
	req, err := http.NewRequest(os.Args[1], os.Args[2], bytes.NewReader(body))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	req.Header = headers
	req.Host = headers.Get("Host") // as a rebound name sends it; "" keeps the URL's
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d\n%s", resp.StatusCode, out)
}

// scriptPIDs lists the processes of the script whose work dir is work
// (found in their environment, or as an argument: a supervisor's names its
// procs directory) and whose command line matches re.
func scriptPIDs(work string, re *regexp.Regexp) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(dir))
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if pid == os.Getpid() || err != nil || len(cmdline) == 0 { // gone, a kernel thread or a zombie
			continue
		}
		if !re.MatchString(strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")) {
			continue
		}
		environ, _ := os.ReadFile(filepath.Join(dir, "environ"))
		for _, kv := range append(strings.Split(string(environ), "\x00"), strings.Split(string(cmdline), "\x00")...) {
			_, v, ok := strings.Cut(kv, "=")
			if !ok {
				v = kv // an argument
			}
			if v == work || strings.HasPrefix(v, work+"/") {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// TestScripts runs the user stories in testdata/script: the real binary
// against a real filesystem under $WORK.
func TestScripts(t *testing.T) {
	testscript.Run(t, scriptParams(filepath.Join("..", "..", "testdata", "script"), nil))
}

// sopsTestdata holds pkg/sops's fixtures, made with the sops library
// (make sops-fixtures).
var sopsTestdata, _ = filepath.Abs(filepath.Join("..", "..", "pkg", "sops", "testdata"))

// scriptParams is how every suite of scripts runs: $ROOT and $STATE in the
// work dir (plus env), the helper commands, and no process left behind.
func scriptParams(dir string, env map[string]string) testscript.Params {
	return testscript.Params{
		Dir: dir,
		Setup: func(e *testscript.Env) error {
			for k, v := range env {
				e.Setenv(k, v)
			}
			// As the [cgroup] condition sees it: CORTEX_SYNC_CGROUP=off runs
			// the scripts without cgroups, so without the agent's supervisor.
			if v := os.Getenv(supervise.CgroupEnv); v != "" {
				e.Setenv(supervise.CgroupEnv, v)
			}
			e.Setenv("ROOT", filepath.Join(e.WorkDir, "root"))
			e.Setenv("STATE", filepath.Join(e.WorkDir, "state"))
			e.Setenv("SOPSDATA", sopsTestdata) // fixtures made with the sops library
			e.Defer(func() { stopProcesses(e.WorkDir) })
			return os.MkdirAll(filepath.Join(e.WorkDir, "root"), 0o755)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":      cmdExits,
			"gitinit":    cmdGitInit,
			"gitcommit":  cmdGitCommit,
			"gitserve":   cmdGitServe,
			"freeport":   cmdFreePort,
			"eventually": cmdEventually,
			"procpid":    cmdProcPID,
			"dead":       cmdDead,
			"sigkill":    cmdSigkill,
			"signal":     cmdSignal,
			"ranfor":     cmdRanFor,
			"grepr":      cmdGrepR,
			"recipe":     cmdRecipe,
			"notifyfake": cmdNotifyFake,
			"hmacsig":    cmdHMACSig,
		},
		Condition: func(cond string) (bool, error) {
			switch cond {
			case "root":
				return os.Geteuid() == 0, nil
			case "cgroup": // a writable cgroup v2 hierarchy: the agent supervises in-process
				dir, _ := supervise.CgroupBase(os.TempDir())
				if dir != "" {
					os.Remove(dir)
				}
				return dir != "", nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	}
}

// cmdExits runs a command and checks its exact exit code:
//
//	exits 2 cortex-sync diff --exit-code ...
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not an exit code", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("exits: %v", err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// git runs git in the script's work directory with a fixed identity.
func git(ts *testscript.TestScript, args ...string) string {
	cmd := exec.Command("git", args...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = append(os.Environ(), "HOME="+ts.Getenv("WORK"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		ts.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// cmdGitInit makes DIR a repository on branch main: gitinit DIR
func cmdGitInit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: gitinit DIR")
	}
	git(ts, "init", "-q", "-b", "main", args[0])
}

// cmdGitCommit commits everything in DIR and sets $HEAD: gitcommit DIR MESSAGE
func cmdGitCommit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: gitcommit DIR MESSAGE")
	}
	git(ts, "-C", args[0], "add", "-A")
	git(ts, "-C", args[0], "commit", "-q", "--allow-empty", "-m", args[1])
	ts.Setenv("HEAD", git(ts, "-C", args[0], "rev-parse", "HEAD"))
}

// cmdGitServe serves DIR with git daemon on 127.0.0.1 and sets $GITURL;
// "gitserve stop" stops it.
func cmdGitServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: gitserve DIR | gitserve stop")
	}
	if args[0] == "stop" {
		if pid := ts.Getenv("GITDAEMON_PID"); pid != "" {
			p, _ := strconv.Atoi(pid)
			syscall.Kill(-p, syscall.SIGKILL)
		}
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Fatalf("%v", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := ts.MkAbs(args[0])
	cmd := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
		"--port="+strconv.Itoa(port), "--base-path="+filepath.Dir(dir), filepath.Dir(dir))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		ts.Fatalf("git daemon: %v", err)
	}
	ts.Defer(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			ts.Fatalf("git daemon did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Setenv("GITDAEMON_PID", strconv.Itoa(cmd.Process.Pid))
	ts.Setenv("GITURL", "git://127.0.0.1:"+strconv.Itoa(port)+"/"+filepath.Base(dir))
}

// cmdFreePort sets VAR to a free TCP port on 127.0.0.1: freeport VAR
func cmdFreePort(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: freeport VAR")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ts.Fatalf("%v", err)
	}
	ts.Setenv(args[0], strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	l.Close()
}

// cmdEventually runs a command until its stdout matches a pattern (with
// !, until it no longer does):
// [!] eventually 10s 'pattern' command args...
func cmdEventually(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 3 {
		ts.Fatalf("usage: eventually TIMEOUT PATTERN command [args...]")
	}
	timeout, err := time.ParseDuration(args[0])
	if err != nil {
		ts.Fatalf("eventually: %v", err)
	}
	re := regexp.MustCompile("(?m)" + args[1])
	deadline := time.Now().Add(timeout)
	for {
		ts.Exec(args[2], args[3:]...)
		if re.MatchString(ts.ReadFile("stdout")) != neg {
			return
		}
		if time.Now().After(deadline) {
			if neg {
				ts.Fatalf("after %s, %s still prints a match for %q", timeout, args[2], args[1])
			}
			ts.Fatalf("after %s, %s still prints no match for %q", timeout, args[2], args[1])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cmdProcPID sets VAR to the pid of a supervised process (or of its shim),
// from the shim's status file: procpid VAR NAME [shim]
func cmdProcPID(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: procpid VAR NAME [shim]")
	}
	data := ts.ReadFile(filepath.Join(ts.Getenv("STATE"), "procs", args[1]+".json"))
	var st struct {
		Shim    struct{ PID int } `json:"shim"`
		Process struct{ PID int } `json:"process"`
	}
	if err := json.Unmarshal([]byte(data), &st); err != nil || st.Process.PID == 0 {
		ts.Fatalf("no running process in %s: %v", data, err)
	}
	pid := st.Process.PID
	if len(args) == 3 {
		pid = st.Shim.PID
	}
	ts.Setenv(args[0], strconv.Itoa(pid))
}

// cmdDead checks that the process whose pid a file holds has exited (gone,
// or a zombie): dead PIDFILE
func cmdDead(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: dead PIDFILE")
	}
	pid := strings.TrimSpace(ts.ReadFile(args[0]))
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	dead := err != nil || strings.Contains(string(stat), ") Z ")
	if dead == neg {
		ts.Fatalf("process %s dead: %v", pid, dead)
	}
}

// cmdRanFor waits, up to 10s past the duration, until the supervised
// process NAME has run for at least DURATION, by its status, the same
// process throughout: a kill after that is no quick failure, whatever the
// load. ranfor NAME DURATION
func cmdRanFor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: ranfor NAME DURATION")
	}
	d, err := time.ParseDuration(args[1])
	if err != nil {
		ts.Fatalf("ranfor: %v", err)
	}
	var first supervise.Identity
	deadline := time.Now().Add(d + 10*time.Second)
	for {
		st, err := supervise.Read(ts.Getenv("STATE"), args[0])
		if err != nil {
			ts.Fatalf("ranfor: %v", err)
		}
		if st != nil && st.State == supervise.Running && st.Process.Alive() {
			if first.PID == 0 {
				first = st.Process
			}
			if st.Process != first {
				ts.Fatalf("%s: pid %d ended while it was waited for; pid %d runs", args[0], first.PID, st.Process.PID)
			}
			if time.Since(st.Started) >= d {
				return
			}
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s did not run for %s", args[0], d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stopProcesses stops every supervised process a script left running:
// supervisors and their processes outlive the commands that start them,
// by design.
func stopProcesses(work string) {
	filepath.WalkDir(work, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "procs" {
			supervise.StopAll(filepath.Dir(p))
			return filepath.SkipDir
		}
		return nil
	})
}

// cmdSigkill kills processes and waits, up to 10s, until each has exited
// (gone, or a zombie): kill(2) returns before its target is dead, so a
// check made at once could still find it running. sigkill PID...
func cmdSigkill(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: sigkill PID...")
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, arg := range args {
		pid, err := strconv.Atoi(arg)
		if err != nil || pid <= 0 {
			ts.Fatalf("sigkill: %q is not a pid", arg)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			ts.Fatalf("sigkill %d: %v", pid, err)
		}
		for {
			stat, err := os.ReadFile("/proc/" + arg + "/stat")
			if err != nil || strings.Contains(string(stat), ") Z ") {
				break
			}
			if time.Now().After(deadline) {
				ts.Fatalf("process %d still runs 10s after SIGKILL", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// cmdSignal sends a signal (HUP, TERM, INT) to the script's processes
// whose command line matches a pattern; at least one must:
//
//	signal HUP 'cortex-sync run'
func cmdSignal(ts *testscript.TestScript, neg bool, args []string) {
	sigs := map[string]syscall.Signal{"HUP": syscall.SIGHUP, "TERM": syscall.SIGTERM, "INT": syscall.SIGINT}
	if neg || len(args) != 2 || sigs[args[0]] == 0 {
		ts.Fatalf("usage: signal HUP|TERM|INT PATTERN")
	}
	pids := scriptPIDs(ts.Getenv("WORK"), regexp.MustCompile(args[1]))
	if len(pids) == 0 {
		ts.Fatalf("signal: no process of this script matches %q", args[1])
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sigs[args[0]]); err != nil {
			ts.Fatalf("signal %d: %v", pid, err)
		}
	}
}

// fileClock is a clock a testscript sets: the RFC 3339 time in file f
// (the real time while f cannot be read).
func fileClock(f string) func() time.Time {
	return func() time.Time {
		b, err := os.ReadFile(f)
		if err != nil {
			return time.Now()
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(b)))
		if err != nil {
			return time.Now()
		}
		return t
	}
}
