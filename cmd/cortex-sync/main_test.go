package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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
			os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

// TestScripts runs the user stories in testdata/script: the real binary
// against a real filesystem under $WORK.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("..", "..", "testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv("ROOT", filepath.Join(env.WorkDir, "root"))
			env.Setenv("STATE", filepath.Join(env.WorkDir, "state"))
			env.Defer(func() { stopProcesses(env.WorkDir) })
			return os.MkdirAll(filepath.Join(env.WorkDir, "root"), 0o755)
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
			"within":     cmdWithin,
		},
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				return os.Geteuid() == 0, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
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

// cmdEventually runs a command until its stdout matches a pattern:
// eventually 10s 'pattern' command args...
func cmdEventually(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
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
		if re.MatchString(ts.ReadFile("stdout")) {
			return
		}
		if time.Now().After(deadline) {
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

// cmdWithin runs a command (which must succeed, or fail with !) and checks
// that it took at most a duration: within 5s cortex-sync sync ...
func cmdWithin(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: within DURATION command [args...]")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		ts.Fatalf("within: %v", err)
	}
	start := time.Now()
	err = ts.Exec(args[1], args[2:]...)
	took := time.Since(start)
	if (err != nil) != neg {
		ts.Fatalf("%s: %v", args[1], err)
	}
	if took > d {
		ts.Fatalf("%s took %s, more than %s", args[1], took.Round(time.Millisecond), d)
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
