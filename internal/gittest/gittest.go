// Package gittest runs real Git servers on 127.0.0.1 for tests: git daemon
// (git://), git http-backend behind net/http/cgi (HTTP, with basic auth), and
// OpenSSH's sshd (SSH, key auth, a throwaway host key).
package gittest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// SSH is an sshd serving the repository to one key.
type SSH struct {
	URL        string
	KeyFile    string // the client's private key
	KnownHosts string // a known_hosts file naming the server's key
	// WrongKnownHosts names another key for the same host.
	WrongKnownHosts string
}

func writeKey(t testing.TB, path string) ssh.PublicKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// SSHD starts OpenSSH's sshd on a free port; the test is skipped when sshd
// is not installed (make test checks for it first).
func (r *Repo) SSHD(t testing.TB) *SSH {
	t.Helper()
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		for _, p := range []string{"/usr/sbin/sshd", "/sbin/sshd"} {
			if _, err := os.Stat(p); err == nil {
				sshd = p
			}
		}
	}
	if sshd == "" {
		t.Skip("sshd not found: install openssh-server to run the SSH tests")
	}
	os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
	dir := t.TempDir()
	hostPub := writeKey(t, filepath.Join(dir, "host_key"))
	clientPub := writeKey(t, filepath.Join(dir, "client_key"))
	otherPub := writeKey(t, filepath.Join(dir, "other_key"))
	os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(clientPub), 0o600)
	port := freePort(t)
	host := fmt.Sprintf("[127.0.0.1]:%d", port)
	known := filepath.Join(dir, "known_hosts")
	os.WriteFile(known, []byte(host+" "+string(ssh.MarshalAuthorizedKey(hostPub))), 0o600)
	wrong := filepath.Join(dir, "wrong_known_hosts")
	os.WriteFile(wrong, []byte(host+" "+string(ssh.MarshalAuthorizedKey(otherPub))), 0o600)
	cfg := filepath.Join(dir, "sshd_config")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host_key
AuthorizedKeysFile %s/authorized_keys
PidFile %s/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
LogLevel ERROR
`, port, dir, dir, dir)), 0o600)
	start(t, sshd, "-D", "-e", "-f", cfg)
	waitPort(t, port)
	user := os.Getenv("USER")
	if user == "" {
		user = "root"
	}
	if out, err := exec.Command("id", "-un").Output(); err == nil {
		user = strings.TrimSpace(string(out))
	}
	return &SSH{
		URL:     fmt.Sprintf("ssh://%s@127.0.0.1:%d%s", user, port, r.Dir),
		KeyFile: filepath.Join(dir, "client_key"), KnownHosts: known, WrongKnownHosts: wrong,
	}
}
