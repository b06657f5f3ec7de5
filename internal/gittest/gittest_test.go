package gittest

import (
	"bytes"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// dial connects to the SSH server with a private key file.
func dial(t *testing.T, s *SSH, keyFile string) (*ssh.Client, error) {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	hostKeys, err := knownhosts.New(s.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	return ssh.Dial("tcp", u.Host, &ssh.ClientConfig{
		User:            u.User.Username(),
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hostKeys,
	})
}

// run runs a command in a new session; stdin is sent, then closed.
func run(t *testing.T, c *ssh.Client, command, stdin string) (stdout, stderr string, code int) {
	t.Helper()
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var out, errOut bytes.Buffer
	sess.Stdin, sess.Stdout, sess.Stderr = strings.NewReader(stdin), &out, &errOut
	err = sess.Run(command)
	var ee *ssh.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitStatus()
	case err != nil:
		t.Fatalf("%s: %v", command, err)
	}
	return out.String(), errOut.String(), code
}

// TestSSHD: the server runs git-upload-pack on the repository for the
// client's key, and refuses other keys, other commands and other paths.
func TestSSHD(t *testing.T) {
	repo := NewRepo(t)
	head := repo.Commit("one", map[string]*string{"a": S("a")})
	s := repo.SSHD(t)

	if _, err := dial(t, s, s.WrongKeyFile); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Fatalf("another key: %v, want it refused", err)
	}
	c, err := dial(t, s, s.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// The ref advertisement, then a flush packet from the client ends it.
	out, errOut, code := run(t, c, "git-upload-pack '"+repo.Dir+"'", "0000")
	if code != 0 || !strings.Contains(out, head+" HEAD") {
		t.Errorf("git-upload-pack: exit %d, stdout %q, stderr %q; want %s advertised", code, out, errOut, head)
	}
	outside := t.TempDir()
	for _, tt := range []struct{ command, want string }{
		{"git-upload-pack '" + outside + "'", "is not the repository"},
		{"git-upload-pack '" + repo.Dir + "/..'", "is not the repository"},
		{"git-upload-pack 'repo'", "is not the repository"},
		{"git-receive-pack '" + repo.Dir + "'", "only git-upload-pack runs here"},
		{"sh -c true", "only git-upload-pack runs here"},
	} {
		if _, errOut, code := run(t, c, tt.command, ""); code == 0 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want it refused with %q", tt.command, code, errOut, tt.want)
		}
	}
	sess, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if err := sess.Shell(); err == nil {
		t.Errorf("a shell was granted")
	}
}
