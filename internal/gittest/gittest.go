// Package gittest runs real Git servers on 127.0.0.1 for tests: git daemon
// (git://), git http-backend behind net/http/cgi (HTTP, with basic auth), and
// an SSH server in the test process itself that runs git-upload-pack (SSH,
// key auth, a throwaway host key).
package gittest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gliderssh "github.com/gliderlabs/ssh"
	"golang.org/x/crypto/ssh"
)

// Repo is a non-bare repository that tests commit to and servers serve.
type Repo struct {
	t    testing.TB
	Base string // the directory servers export
	Name string
	Dir  string // Base/Name
}

// NewRepo makes an empty repository with branch main.
func NewRepo(t testing.TB) *Repo {
	t.Helper()
	base := t.TempDir()
	r := &Repo{t: t, Base: base, Name: "repo", Dir: filepath.Join(base, "repo")}
	r.Git("init", "-q", "-b", "main", r.Dir)
	r.Git("-C", r.Dir, "config", "user.email", "test@example.com")
	r.Git("-C", r.Dir, "config", "user.name", "Test")
	r.Git("-C", r.Dir, "config", "commit.gpgsign", "false")
	r.Git("-C", r.Dir, "config", "tag.gpgsign", "false")
	return r
}

// Git runs git and returns its trimmed output.
func (r *Repo) Git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.Base, "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit writes files (a nil value deletes one) and commits; it returns the SHA.
func (r *Repo) Commit(msg string, files map[string]*string) string {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(r.Dir, name)
		if content == nil {
			os.RemoveAll(p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(*content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.Git("-C", r.Dir, "add", "-A")
	r.Git("-C", r.Dir, "commit", "-q", "--allow-empty", "-m", msg)
	return r.Head()
}

// Head is the SHA of HEAD.
func (r *Repo) Head() string { return r.Git("-C", r.Dir, "rev-parse", "HEAD") }

// S makes a *string for Commit.
func S(s string) *string { return &s }

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitPort(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("nothing listens on 127.0.0.1:%d", port)
}

// start runs a server process until the test ends.
func start(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that stopping it stops the children it
	// forked per connection too; they hold the output pipe open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		stopGroup(cmd)
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	return cmd
}

// Daemon serves the repository over git:// and returns its URL.
func (r *Repo) Daemon(t testing.TB) (url string, stop func()) {
	t.Helper()
	port := freePort(t)
	cmd := start(t, "git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
		fmt.Sprintf("--port=%d", port), "--base-path="+r.Base, r.Base)
	waitPort(t, port)
	return fmt.Sprintf("git://127.0.0.1:%d/%s", port, r.Name), func() { stopGroup(cmd) }
}

// stopGroup kills a server and everything it forked, and reaps it.
func stopGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

// HTTP serves the repository through git http-backend, requiring basic auth
// with user and password. Requests counts what reaches the server.
type HTTP struct {
	URL      string
	Requests atomic.Int64
	Server   *httptest.Server
}

// HTTP starts the smart-HTTP server.
func (r *Repo) HTTP(t testing.TB, user, password string) *HTTP {
	t.Helper()
	return r.serveHTTP(t, user, password, false)
}

// HTTPS starts the smart-HTTP server over TLS with a certificate of its
// own; CAFile is a PEM bundle that trusts it.
func (r *Repo) HTTPS(t testing.TB, user, password string) (h *HTTP, caFile string) {
	t.Helper()
	h = r.serveHTTP(t, user, password, true)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.Server.Certificate().Raw})
	if err := os.WriteFile(caFile, block, 0o600); err != nil {
		t.Fatal(err)
	}
	return h, caFile
}

func (r *Repo) serveHTTP(t testing.TB, user, password string, tls bool) *HTTP {
	t.Helper()
	execPath := r.Git("--exec-path")
	h := &HTTP{}
	backend := &cgi.Handler{
		Path: filepath.Join(execPath, "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + r.Base, "GIT_HTTP_EXPORT_ALL=1"},
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.Requests.Add(1)
		u, p, ok := req.BasicAuth()
		if !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, req)
	})
	if tls {
		h.Server = httptest.NewTLSServer(handler)
	} else {
		h.Server = httptest.NewServer(handler)
	}
	t.Cleanup(h.Server.Close)
	h.URL = h.Server.URL + "/" + r.Name
	return h
}

// SSH is an SSH server, in this process, serving the repository to one key.
type SSH struct {
	URL        string
	KeyFile    string // the client's private key
	KnownHosts string // a known_hosts file naming the server's key
	// WrongKnownHosts names another key for the same host.
	WrongKnownHosts string
	// WrongKeyFile is a private key the server refuses.
	WrongKeyFile string
}

// newKey makes an ed25519 key; its private half goes to file unless that
// is empty.
func newKey(t testing.TB, file string) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	if file == "" {
		return signer
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return signer
}

// SSHD serves the repository over SSH on a free port of 127.0.0.1 until
// the test ends: a throwaway ed25519 host key, public-key auth for the
// client's key alone, and exec requests for git-upload-pack on this
// repository, which run the real git-upload-pack.
func (r *Repo) SSHD(t testing.TB) *SSH {
	t.Helper()
	dir := t.TempDir()
	s := &SSH{
		KeyFile:         filepath.Join(dir, "client_key"),
		KnownHosts:      filepath.Join(dir, "known_hosts"),
		WrongKnownHosts: filepath.Join(dir, "wrong_known_hosts"),
		WrongKeyFile:    filepath.Join(dir, "wrong_key"),
	}
	hostKey := newKey(t, "")
	clientKey := newKey(t, s.KeyFile)
	newKey(t, s.WrongKeyFile)
	execPath := r.Git("--exec-path")

	var (
		mu       sync.Mutex // guards closed
		closed   bool
		sessions sync.WaitGroup
	)
	srv := &gliderssh.Server{
		// The only auth method offered: no password, no keyboard-interactive.
		PublicKeyHandler: func(_ gliderssh.Context, key gliderssh.PublicKey) bool {
			return gliderssh.KeysEqual(key, clientKey.PublicKey())
		},
		// No shell, subsystem or pty: a command, or nothing.
		SessionRequestCallback: func(_ gliderssh.Session, kind string) bool { return kind == "exec" },
		Handler: func(sess gliderssh.Session) {
			mu.Lock()
			if closed {
				mu.Unlock()
				sess.Exit(255)
				return
			}
			sessions.Add(1)
			mu.Unlock()
			defer sessions.Done()
			sess.Exit(r.serveGit(sess, execPath))
		},
	}
	srv.AddHostKey(hostKey)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(l)
	}()
	t.Cleanup(func() {
		// Closing the connections cancels their sessions' contexts, which
		// kills the commands still running.
		srv.Close()
		l.Close() // should Serve not have taken it yet
		<-served
		mu.Lock()
		closed = true
		mu.Unlock()
		sessions.Wait()
	})

	addr := l.Addr().(*net.TCPAddr)
	host := fmt.Sprintf("[127.0.0.1]:%d", addr.Port)
	otherKey := newKey(t, "")
	for file, key := range map[string]ssh.PublicKey{s.KnownHosts: hostKey.PublicKey(), s.WrongKnownHosts: otherKey.PublicKey()} {
		if err := os.WriteFile(file, []byte(host+" "+string(ssh.MarshalAuthorizedKey(key))), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.URL = fmt.Sprintf("ssh://git@127.0.0.1:%d%s", addr.Port, r.Dir)
	return s
}

// serveGit runs the git-upload-pack that an exec request names, wired to
// the session, and returns its exit status. It runs nothing else, and on
// nothing but this repository.
func (r *Repo) serveGit(sess gliderssh.Session, execPath string) int {
	argv := sess.Command()
	if len(argv) != 2 || argv[0] != "git-upload-pack" {
		fmt.Fprintf(sess.Stderr(), "gittest: only git-upload-pack runs here, not %q\n", sess.RawCommand())
		return 127
	}
	if !r.holds(argv[1]) {
		fmt.Fprintf(sess.Stderr(), "gittest: %q is not the repository %s\n", argv[1], r.Dir)
		return 128
	}
	cmd := exec.CommandContext(sess.Context(), filepath.Join(execPath, argv[0]), argv[1])
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.Base)
	cmd.Stdout, cmd.Stderr = sess, sess.Stderr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		fmt.Fprintln(sess.Stderr(), err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(sess.Stderr(), err)
		return 127
	}
	// Not waited for: the client may never close its end. It ends once
	// Wait closes the pipe or the session closes.
	go func() {
		io.Copy(stdin, sess)
		stdin.Close()
	}()
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code >= 0 {
		return code
	}
	return 255 // killed by a signal
}

// holds reports whether path is absolute and, symlinks resolved, the
// repository or inside it.
func (r *Repo) holds(path string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	dir, err := filepath.EvalSymlinks(r.Dir)
	if err != nil {
		return false
	}
	path, err = filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
