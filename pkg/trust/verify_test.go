package trust

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// keys made once by ssh-keygen for the whole file.
type keys struct {
	dir string
	msg []byte
	pub map[string]string // name -> "ssh-ed25519 AAAA…"
	sig map[string][]byte // name -> armored signature over msg
}

func needKeygen(t testing.TB) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen not installed")
	}
}

func run(t testing.TB, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// keygen makes a key pair with ssh-keygen.
func keygen(t testing.TB, dir, name, typ string) string {
	run(t, dir, "ssh-keygen", "-q", "-t", typ, "-N", "", "-C", name, "-f", name)
	b, err := os.ReadFile(filepath.Join(dir, name+".pub"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// sign signs file msg with ssh-keygen -Y sign.
func sign(t testing.TB, dir, key, namespace string) []byte {
	os.Remove(filepath.Join(dir, "msg.sig"))
	run(t, dir, "ssh-keygen", "-Y", "sign", "-q", "-f", key, "-n", namespace, "msg")
	b, err := os.ReadFile(filepath.Join(dir, "msg.sig"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func makeKeys(t *testing.T) *keys {
	needKeygen(t)
	dir := t.TempDir()
	k := &keys{dir: dir, msg: []byte("tree 1234\nauthor a\n\nthe commit\n"), pub: map[string]string{}, sig: map[string][]byte{}}
	if err := os.WriteFile(filepath.Join(dir, "msg"), k.msg, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]string{"alice": "ed25519", "bob": "ecdsa", "carol": "rsa", "ca": "ed25519", "dave": "ed25519", "erin": "ed25519"} {
		k.pub[name] = keygen(t, dir, name, typ)
	}
	// dave holds a certificate for alice@example.com and dave@example.com;
	// erin one that expired in 2020.
	run(t, dir, "ssh-keygen", "-q", "-s", "ca", "-I", "dave-cert", "-n", "alice@example.com,dave@example.com", "-V", "20200101:20990101", "dave.pub")
	run(t, dir, "ssh-keygen", "-q", "-s", "ca", "-I", "erin-cert", "-n", "erin@example.com", "-V", "20190101:20200101", "erin.pub")
	for _, name := range []string{"alice", "bob", "carol"} {
		k.sig[name] = sign(t, dir, name, "git")
	}
	// Given the certificate, ssh-keygen signs with it (and the key beside it).
	k.sig["dave"] = sign(t, dir, "dave-cert.pub", "git")
	k.sig["erin"] = sign(t, dir, "erin-cert.pub", "git")
	k.sig["alice-file"] = sign(t, dir, "alice", "file")
	k.sig["carol-sha1"] = sha1Signature(t, filepath.Join(dir, "carol"), k.msg, "git")
	return k
}

// sha1Signature makes the signature an old signer would: RSA over SHA-1
// ("ssh-rsa"), which ssh-keygen no longer makes.
func sha1Signature(t *testing.T, keyFile string, msg []byte, namespace string) []byte {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	h := sha512.Sum512(msg)
	blob := ssh.Marshal(struct {
		Magic     [6]byte
		Namespace string
		Reserved  string
		Hash      string
		Sum       string
	}{[6]byte{'S', 'S', 'H', 'S', 'I', 'G'}, namespace, "", "sha512", string(h[:])})
	raw, err := signer.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, blob, ssh.KeyAlgoRSA)
	if err != nil {
		t.Fatal(err)
	}
	return sshsig.Armor(&sshsig.Signature{Version: 1, PublicKey: signer.PublicKey(), Namespace: namespace, HashAlgorithm: sshsig.HashSHA512, Signature: raw})
}

// TestVerifyAgreesWithSSHKeygen runs ssh-keygen -Y verify and our Verify on
// the same allowed signers, signature and principal: both accept or both
// refuse, and each case says which.
func TestVerifyAgreesWithSSHKeygen(t *testing.T) {
	k := makeKeys(t)
	now := time.Now().UTC()
	certLine := func(principals string) string { return principals + " cert-authority " + k.pub["ca"] }
	cases := []struct {
		name, allowed, principal, sig string
		at                            time.Time
		ok                            bool
		is                            error
	}{
		{name: "exact principal", allowed: "alice@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "other principal", allowed: "alice@example.com " + k.pub["alice"], principal: "bob@example.com", sig: "alice", is: ErrNotAllowed},
		{name: "comments and blanks", allowed: "# team\n\n   \nalice@example.com " + k.pub["alice"] + " laptop\n# end\n", principal: "alice@example.com", sig: "alice", ok: true},
		{name: "wildcard", allowed: "*@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "question mark", allowed: "al?ce@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "list", allowed: "root@h,alice@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "negated", allowed: "*@example.com,!alice@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice", is: ErrNotAllowed},
		{name: "quoted principal", allowed: `"alice@example.com" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "unknown key", allowed: "alice@example.com " + k.pub["bob"], principal: "alice@example.com", sig: "alice", is: ErrNotAllowed},
		{name: "ecdsa", allowed: "bob@example.com " + k.pub["bob"], principal: "bob@example.com", sig: "bob", ok: true},
		{name: "rsa-sha2-512", allowed: "carol@example.com " + k.pub["carol"], principal: "carol@example.com", sig: "carol", ok: true},
		{name: "rsa sha1", allowed: "carol@example.com " + k.pub["carol"], principal: "carol@example.com", sig: "carol-sha1", is: ErrWeakSignature},
		{name: "namespaces git", allowed: `alice@example.com namespaces="file,git" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "namespaces file only", allowed: `alice@example.com namespaces="file" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", is: ErrNotAllowed},
		{name: "namespace pattern", allowed: `alice@example.com namespaces="g*,!file" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "signed for file", allowed: "alice@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice-file", is: ErrNotAllowed},
		{name: "expired", allowed: `alice@example.com valid-before="20200101" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", is: ErrNotAllowed},
		{name: "an expired line, then a good one for the principal", allowed: `alice@example.com valid-before="20200101" ` + k.pub["alice"] + "\n*@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "expired at commit time", allowed: `alice@example.com valid-before="20200101Z" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", at: time.Date(2019, 6, 1, 0, 0, 0, 0, time.UTC), ok: true},
		{name: "not yet valid", allowed: `alice@example.com valid-after="20990101000000Z" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", is: ErrNotAllowed},
		{name: "valid window", allowed: `alice@example.com VALID-AFTER="202001010000",valid-before="20990101Z" ` + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "second line", allowed: "alice@example.com " + k.pub["bob"] + "\nalice@example.com " + k.pub["alice"], principal: "alice@example.com", sig: "alice", ok: true},
		{name: "certificate", allowed: certLine("*@example.com"), principal: "alice@example.com", sig: "dave", ok: true},
		{name: "certificate other principal", allowed: certLine("*@example.com"), principal: "bob@example.com", sig: "dave", is: ErrNotAllowed},
		{name: "certificate line principal", allowed: certLine("dave@example.com"), principal: "alice@example.com", sig: "dave", is: ErrNotAllowed},
		{name: "certificate before its time", allowed: certLine("*@example.com"), principal: "alice@example.com", sig: "dave", at: time.Date(2019, 1, 1, 0, 0, 0, 0, time.UTC), is: ErrNotAllowed},
		{name: "certificate expired", allowed: certLine("*@example.com"), principal: "erin@example.com", sig: "erin", is: ErrNotAllowed},
		{name: "certificate expired, at its time", allowed: certLine("*@example.com"), principal: "erin@example.com", sig: "erin", at: time.Date(2019, 6, 1, 0, 0, 0, 0, time.UTC), ok: true},
		{name: "CA key without cert-authority", allowed: "*@example.com " + k.pub["ca"], principal: "alice@example.com", sig: "dave", is: ErrNotAllowed},
		{name: "certificate's key as a plain key", allowed: "alice@example.com " + k.pub["dave"], principal: "alice@example.com", sig: "dave", is: ErrNotAllowed},
		{name: "cert-authority for a plain key", allowed: certLine("alice@example.com") + "\nbob@example.com cert-authority " + k.pub["alice"], principal: "alice@example.com", sig: "alice", is: ErrNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at := c.at
			if at.IsZero() {
				at = now
			}
			file := filepath.Join(t.TempDir(), "allowed_signers")
			if err := os.WriteFile(file, []byte(c.allowed+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			sigFile := filepath.Join(t.TempDir(), "msg.sig")
			if err := os.WriteFile(sigFile, k.sig[c.sig], 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", file, "-I", c.principal, "-n", "git", "-s", sigFile, "-Overify-time="+at.UTC().Format("20060102150405")+"Z")
			cmd.Stdin = bytes.NewReader(k.msg)
			out, err := cmd.CombinedOutput()
			if theirs := err == nil; theirs != c.ok {
				t.Fatalf("ssh-keygen -Y verify: accepted=%v, want %v\n%s", theirs, c.ok, out)
			}
			a, err := LoadAllowedSigners(file)
			if err != nil {
				t.Fatal(err)
			}
			v, err := a.Verify(k.msg, k.sig[c.sig], "git", c.principal, at)
			if ours := err == nil; ours != c.ok {
				t.Fatalf("Verify: accepted=%v (%v), want %v; ssh-keygen said:\n%s", ours, err, c.ok, out)
			}
			if err != nil {
				if !errors.Is(err, c.is) {
					t.Errorf("Verify: %v, want %v", err, c.is)
				}
				return
			}
			if len(v.Principals) == 0 || !strings.HasPrefix(v.Fingerprint, "SHA256:") {
				t.Errorf("Verify: %+v", v)
			}
			if !strings.Contains(string(out), v.Fingerprint) {
				t.Errorf("fingerprint %s is not the one ssh-keygen names:\n%s", v.Fingerprint, out)
			}
			// Tampered, the message is refused by both.
			bad := append(append([]byte{}, k.msg...), 'x')
			if _, err := a.Verify(bad, k.sig[c.sig], "git", c.principal, at); !errors.Is(err, ErrBadSignature) {
				t.Errorf("tampered message: %v, want %v", err, ErrBadSignature)
			}
		})
	}
}

// TestFindPrincipalsAgreesWithSSHKeygen: the same principals as ssh-keygen
// -Y find-principals prints, or none when it finds none.
func TestFindPrincipalsAgreesWithSSHKeygen(t *testing.T) {
	k := makeKeys(t)
	cases := []struct {
		name, allowed, sig string
		// differs: what we find where ssh-keygen (9.2) disagrees on
		// purpose: its cert_filter_principals takes a negated match
		// (match_pattern_list's -1) for a match; -Y verify -I refuses
		// that principal, and so do we in both.
		differs string
	}{
		{"plain", "alice@example.com,al@example.com " + k.pub["alice"], "alice", ""},
		{"first line wins", "bob@x " + k.pub["bob"] + "\nfirst@x " + k.pub["alice"] + "\nsecond@x " + k.pub["alice"], "alice", ""},
		{"namespace not asked", `alice@x namespaces="file" ` + k.pub["alice"], "alice", ""},
		{"expired skipped", `old@x valid-before="20200101Z" ` + k.pub["alice"] + "\nnew@x " + k.pub["alice"], "alice", ""},
		{"none", "bob@x " + k.pub["bob"], "alice", ""},
		{"certificate", "*@example.com cert-authority " + k.pub["ca"], "dave", ""},
		{"certificate, one principal", "alice@example.com cert-authority " + k.pub["ca"], "dave", ""},
		{"certificate, negated principal", "*@example.com,!dave@example.com cert-authority " + k.pub["ca"], "dave", "alice@example.com"},
		{"expired certificate", "*@example.com cert-authority " + k.pub["ca"], "erin", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "allowed_signers")
			if err := os.WriteFile(file, []byte(c.allowed+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			sigFile := filepath.Join(t.TempDir(), "msg.sig")
			if err := os.WriteFile(sigFile, k.sig[c.sig], 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("ssh-keygen", "-Y", "find-principals", "-f", file, "-s", sigFile).Output()
			var theirs []string
			if err == nil {
				theirs = strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), ",", " "))
			}
			a, err := LoadAllowedSigners(file)
			if err != nil {
				t.Fatal(err)
			}
			ps, err := a.FindPrincipals(k.sig[c.sig], time.Now())
			var ours []string
			for _, p := range ps {
				ours = append(ours, strings.Split(p, ",")...)
			}
			if c.differs != "" {
				if strings.Join(ours, " ") != c.differs {
					t.Fatalf("FindPrincipals = %q (%v), want %q (ssh-keygen: %q)", ours, err, c.differs, theirs)
				}
				return
			}
			if strings.Join(ours, " ") != strings.Join(theirs, " ") {
				t.Fatalf("FindPrincipals = %q (%v), ssh-keygen = %q", ours, err, theirs)
			}
		})
	}
}

// TestParseErrors: a bad line is an error naming file:line and what is
// wrong; ssh-keygen refuses each line too.
func TestParseErrors(t *testing.T) {
	k := makeKeys(t)
	cases := []struct{ name, line, want string }{
		{"no key", "alice@example.com", "no key follows"},
		{"not a key", "alice@example.com ssh-ed25519", "not a public key"},
		{"bad base64", "alice@example.com ssh-ed25519 !!!!", "bad base64"},
		{"type mismatch", "alice@example.com ssh-rsa " + strings.Fields(k.pub["alice"])[1], "its data is a ssh-ed25519 key"},
		{"unknown option", "alice@example.com no-touch-required " + k.pub["alice"], `unsupported option "no-touch-required"`},
		{"unquoted value", "alice@example.com namespaces=git " + k.pub["alice"], "must be quoted"},
		{"bad time", `alice@example.com valid-after="2020" ` + k.pub["alice"], "YYYYMMDD"},
		{"bad date", `alice@example.com valid-after="20201341" ` + k.pub["alice"], "valid-after"},
		{"twice", `alice@example.com namespaces="git",namespaces="file" ` + k.pub["alice"], "given twice"},
		{"unterminated quote", `"alice@example.com ` + k.pub["alice"], "unterminated quote"},
		{"options without key", `alice@example.com namespaces="git"`, "no key follows"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseAllowedSigners("signers", []byte("# ok\n"+k.pub["alice"][:0]+"\n"+c.line+"\n"))
			if err == nil || !strings.HasPrefix(err.Error(), "signers:3: ") || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want signers:3: …%s", err, c.want)
			}
			file := filepath.Join(t.TempDir(), "allowed_signers")
			if err := os.WriteFile(file, []byte(c.line+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", file, "-I", "alice@example.com", "-n", "git", "-s", "/dev/stdin")
			cmd.Stdin = bytes.NewReader(k.sig["alice"])
			if err := cmd.Run(); err == nil {
				t.Errorf("ssh-keygen accepted %q", c.line)
			}
		})
	}
}

func TestMatchPatternList(t *testing.T) {
	for _, c := range []struct {
		s, list string
		want    bool
	}{
		{"a@b", "a@b", true}, {"a@b", "*", true}, {"a@b", "?@?", true}, {"a@b", "??@b", false},
		{"a@b", "x,a@*", true}, {"a@b", "*,!a@b", false}, {"a@b", "!x", false}, {"", "*", true},
		{"abc", "a*c*", true}, {"abc", "a*d", false},
	} {
		if got := MatchPatternList(c.s, c.list); got != c.want {
			t.Errorf("MatchPatternList(%q, %q) = %v", c.s, c.list, got)
		}
	}
}
