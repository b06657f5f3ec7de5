package source_test

import (
	"context"
	"crypto/rand"
	"crypto/sha512"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"github.com/cortex-sync/cortex-sync/internal/gittest"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// signer is an SSH key made by ssh-keygen that git signs with.
type signer struct{ key, pub string }

func sshSigner(t testing.TB, name, typ string) signer {
	t.Helper()
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("ssh-keygen not installed")
	}
	key := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", typ, "-N", "", "-C", name, "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return signer{key: key, pub: strings.TrimSpace(string(pub))}
}

// signAs makes the repository's next commits and tags signed by s with
// git's gpg.format=ssh; the zero signer makes them unsigned.
func signAs(repo *gittest.Repo, s signer) {
	if s.key == "" {
		repo.Git("-C", repo.Dir, "config", "commit.gpgsign", "false")
		return
	}
	repo.Git("-C", repo.Dir, "config", "gpg.format", "ssh")
	repo.Git("-C", repo.Dir, "config", "user.signingkey", s.key)
	repo.Git("-C", repo.Dir, "config", "commit.gpgsign", "true")
}

func writeFile(t testing.TB, content string) string {
	p := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func untrusted(t *testing.T, err error) *source.UntrustedError {
	t.Helper()
	var u *source.UntrustedError
	if !errors.As(err, &u) || !errors.Is(err, source.ErrUntrusted) {
		t.Fatalf("error %v, want an *UntrustedError wrapping ErrUntrusted", err)
	}
	return u
}

// TestVerifySSH: commits signed by git with SSH keys, checked against an
// allowed signers file; each refusal names the commit, the signer and why.
func TestVerifySSH(t *testing.T) {
	alice, bob := sshSigner(t, "alice", "ed25519"), sshSigner(t, "bob", "ecdsa")
	repo := gittest.NewRepo(t)
	url := "file://" + repo.Dir
	fetch := func(allowed string, set func(g *source.Git)) (*source.Checkout, error) {
		g := newGit(t, url)
		g.VerifyAllowedSigners = writeFile(t, allowed)
		if set != nil {
			set(g)
		}
		co, err := g.Fetch(context.Background())
		if err == nil {
			co.Close()
		}
		return co, err
	}
	aliceLine := "test@example.com " + alice.pub + "\n"

	unsigned := repo.Commit("unsigned", map[string]*string{"a": gittest.S("a")})
	u := untrusted(t, second(fetch(aliceLine, nil)))
	if u.Signer != "unsigned" || u.Object != "commit "+unsigned || !strings.Contains(u.Error(), "commit "+unsigned+" is not signed") {
		t.Errorf("unsigned: %+v", u)
	}

	signAs(repo, alice)
	signed := repo.Commit("by alice", map[string]*string{"a": gittest.S("b")})
	if co, err := fetch(aliceLine, nil); err != nil || co.Revision != "main@sha1:"+signed {
		t.Fatalf("signed by alice, allowed: %v", err)
	}
	fp := fingerprint(t, alice.pub)

	t.Run("unknown key", func(t *testing.T) {
		u := untrusted(t, second(fetch("test@example.com "+bob.pub+"\n", nil)))
		if u.Signer != "SSH key "+fp || !strings.Contains(u.Why, "is not in") {
			t.Errorf("%+v", u)
		}
	})
	t.Run("expired", func(t *testing.T) {
		// The committer date is 2026-01-01: the key expired before.
		u := untrusted(t, second(fetch(`test@example.com valid-before="20251231Z" `+alice.pub+"\n", nil)))
		if !strings.Contains(u.Why, "expired") {
			t.Errorf("%+v", u)
		}
		if _, err := fetch(`test@example.com valid-before="20260102Z" `+alice.pub+"\n", nil); err != nil {
			t.Errorf("valid at the committer time: %v", err)
		}
	})
	t.Run("namespace", func(t *testing.T) {
		u := untrusted(t, second(fetch(`test@example.com namespaces="file" `+alice.pub+"\n", nil)))
		if !strings.Contains(u.Why, `namespace "git" is not allowed`) {
			t.Errorf("%+v", u)
		}
	})
	t.Run("committer match", func(t *testing.T) {
		match := func(g *source.Git) { g.VerifyCommitterMatch = true }
		u := untrusted(t, second(fetch("alice@example.com "+alice.pub+"\n", match)))
		if u.Signer != "SSH key "+fp+" (alice@example.com)" || !strings.Contains(u.Why, "not the committer test@example.com") {
			t.Errorf("%+v", u)
		}
		if _, err := fetch("alice@example.com "+alice.pub+"\n", nil); err != nil {
			t.Errorf("without the match: %v", err)
		}
		if _, err := fetch("*@example.com "+alice.pub+"\n", match); err != nil {
			t.Errorf("a principal pattern that matches the committer: %v", err)
		}
	})
	t.Run("keyring only", func(t *testing.T) {
		_, keyring := pgpKey(t, "trusted")
		g := newGit(t, url)
		g.VerifyKeyring = keyring
		_, err := g.Fetch(context.Background())
		if u := untrusted(t, err); !strings.Contains(u.Why, "--verify-allowed-signers, which is not given") {
			t.Errorf("%+v", u)
		}
	})
	t.Run("bad allowed signers", func(t *testing.T) {
		_, err := fetch(aliceLine+"bob@example.com cert-authority\n", nil)
		if err == nil || errors.Is(err, source.ErrUntrusted) || !strings.Contains(err.Error(), "allowed_signers:2: ") {
			t.Errorf("%v, want the file and line named", err)
		}
	})
	t.Run("key removed", func(t *testing.T) {
		// The revision the host runs is not verified again; a new one is.
		file := writeFile(t, aliceLine)
		g := newGit(t, url)
		g.VerifyAllowedSigners = file
		co, err := g.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		co.Close()
		g.Base = func() string { return co.Revision }
		os.WriteFile(file, []byte("# alice left\n"), 0o600)
		if co, err = g.Fetch(context.Background()); err != nil {
			t.Fatalf("the revision the host runs, again: %v", err)
		}
		co.Close()
		next := repo.Commit("alice again", map[string]*string{"a": gittest.S("c")})
		u := untrusted(t, second(g.Fetch(context.Background())))
		if u.Object != "commit "+next {
			t.Errorf("%+v", u)
		}
	})
}

func second[T any](_ T, err error) error { return err }

func fingerprint(t *testing.T, pub string) string {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	return ssh.FingerprintSHA256(k)
}

// TestVerifySHA1RSA: a commit signed with RSA over SHA-1 ("ssh-rsa", as
// old signers made) is refused though its key is allowed.
func TestVerifySHA1RSA(t *testing.T) {
	carol := sshSigner(t, "carol", "rsa")
	repo := gittest.NewRepo(t)
	repo.Commit("base", map[string]*string{"a": gittest.S("a")})
	r, err := git.PlainOpen(repo.Dir)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := r.Head()
	parent, _ := r.CommitObject(head.Hash())
	who := object.Signature{Name: "T", Email: "test@example.com", When: time.Now()}
	c := &object.Commit{Author: who, Committer: who, Message: "sha1", TreeHash: parent.TreeHash, ParentHashes: []plumbing.Hash{parent.Hash}}
	obj := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(obj); err != nil {
		t.Fatal(err)
	}
	rd, _ := obj.Reader()
	msg := make([]byte, obj.Size())
	if _, err := rd.Read(msg); err != nil {
		t.Fatal(err)
	}
	c.PGPSignature = string(sha1Signature(t, carol.key, msg))
	enc := r.Storer.NewEncodedObject()
	if err := c.Encode(enc); err != nil {
		t.Fatal(err)
	}
	h, err := r.Storer.SetEncodedObject(enc)
	if err != nil {
		t.Fatal(err)
	}
	r.Storer.SetReference(plumbing.NewHashReference("refs/heads/main", h))

	g := newGit(t, "file://"+repo.Dir)
	g.VerifyAllowedSigners = writeFile(t, "test@example.com "+carol.pub+"\n")
	_, err = g.Fetch(context.Background())
	if u := untrusted(t, err); u.Object != "commit "+h.String() || u.Signer != "an SSH RSA key" || !strings.Contains(u.Why, "SHA-1") || !strings.Contains(u.Why, "rsa-sha2-512") {
		t.Errorf("%+v", u)
	}
}

// sha1Signature signs msg as an old ssh-keygen did: RSA over SHA-1.
func sha1Signature(t *testing.T, keyFile string, msg []byte) []byte {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(msg)
	blob := ssh.Marshal(struct {
		Magic                     [6]byte
		Namespace, Reserved, Hash string
		Sum                       string
	}{[6]byte{'S', 'S', 'H', 'S', 'I', 'G'}, "git", "", "sha512", string(sum[:])})
	raw, err := s.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, blob, ssh.KeyAlgoRSA)
	if err != nil {
		t.Fatal(err)
	}
	return sshsig.Armor(&sshsig.Signature{Version: 1, PublicKey: s.PublicKey(), Namespace: "git", HashAlgorithm: sshsig.HashSHA512, Signature: raw})
}

// TestVerifyAncestry: every first-parent commit since the one the host
// runs must be signed; head mode sees the tip only.
func TestVerifyAncestry(t *testing.T) {
	alice := sshSigner(t, "alice", "ed25519")
	repo := gittest.NewRepo(t)
	signAs(repo, alice)
	base := repo.Commit("base", map[string]*string{"a": gittest.S("a")})
	signAs(repo, signer{})
	middle := repo.Commit("unsigned, in the middle", map[string]*string{"a": gittest.S("b")})
	signAs(repo, alice)
	tip := repo.Commit("signed tip", map[string]*string{"a": gittest.S("c")})
	allowed := writeFile(t, "test@example.com "+alice.pub+"\n")
	mk := func(mode, base string) *source.Git {
		g := newGit(t, "file://"+repo.Dir)
		g.VerifyAllowedSigners, g.VerifyMode = allowed, mode
		if base != "" {
			g.Base = func() string { return "main@sha1:" + base }
		}
		return g
	}
	if _, err := mk("head", base).Fetch(context.Background()); err != nil {
		t.Fatalf("head mode sees the signed tip: %v", err)
	}
	if _, err := mk("ancestry", "").Fetch(context.Background()); err != nil {
		t.Fatalf("ancestry without a base (first sync) checks the tip: %v", err)
	}
	_, err := mk("ancestry", base).Fetch(context.Background())
	u := untrusted(t, err)
	if u.Object != "commit "+middle || u.Signer != "unsigned" || u.Revision != "main@sha1:"+tip || !strings.Contains(u.Why, "1 first-parent commit below the tip") {
		t.Fatalf("%v", u)
	}
	if _, err := mk("ancestry", middle).Fetch(context.Background()); err != nil {
		t.Fatalf("from the unsigned commit (applied before), the rest is signed: %v", err)
	}

	// A shallow cache (depth 1 at the first fetch) deepens to reach the base.
	g := mk("ancestry", "")
	co, err := g.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	co.Close()
	newer := repo.Commit("newer", map[string]*string{"a": gittest.S("d")})
	g.Base = func() string { return "main@sha1:" + middle }
	co, err = g.Fetch(context.Background())
	if err != nil {
		t.Fatalf("deepening to the base: %v", err)
	}
	co.Close()
	if co.Revision != "main@sha1:"+newer || g.Stats.Fetches != 3 {
		t.Errorf("%s after %d fetches, want %s after 3 (first, new, deepen)", co.Revision, g.Stats.Fetches, newer)
	}

	// A force-push: the base is not in the new history.
	repo.Git("-C", repo.Dir, "reset", "-q", "--hard", base)
	repo.Git("-C", repo.Dir, "commit", "-q", "--amend", "-m", "rewritten")
	_, err = mk("ancestry", tip).Fetch(context.Background())
	if u := untrusted(t, err); !strings.Contains(u.Why, "is not a first-parent ancestor") || !strings.Contains(u.Why, "--verify-mode head") {
		t.Errorf("force-push: %v", u)
	}
}

// TestVerifyTag: tag modes check the annotated tag; an unsigned one is
// refused, and tag modes need --tag or --semver.
func TestVerifyTag(t *testing.T) {
	alice := sshSigner(t, "alice", "ed25519")
	repo := gittest.NewRepo(t)
	signAs(repo, alice)
	repo.Commit("signed", map[string]*string{"a": gittest.S("a")})
	repo.Git("-C", repo.Dir, "tag", "-a", "-m", "unsigned tag", "v1.0.0")
	repo.Git("-C", repo.Dir, "tag", "-s", "-m", "signed tag", "v1.1.0")
	allowed := writeFile(t, "test@example.com "+alice.pub+"\n")
	fetch := func(mode, tag string) error {
		g := newGit(t, "file://"+repo.Dir)
		g.Branch, g.Tag, g.VerifyAllowedSigners, g.VerifyMode = "", tag, allowed, mode
		_, err := g.Fetch(context.Background())
		return err
	}
	for _, mode := range []string{"tag", "tag-and-head"} {
		if u := untrusted(t, fetch(mode, "v1.0.0")); u.Object != "tag v1.0.0" || u.Signer != "unsigned" {
			t.Errorf("%s, unsigned tag: %+v", mode, u)
		}
		if err := fetch(mode, "v1.1.0"); err != nil {
			t.Errorf("%s, signed tag: %v", mode, err)
		}
	}
	if err := fetch("head", "v1.0.0"); err != nil {
		t.Errorf("head mode does not look at the tag: %v", err)
	}
	// Refused, then the tag is signed again on the same commit: the cache
	// holds the commit, not the new tag object, which is fetched.
	again := newGit(t, "file://"+repo.Dir)
	again.Branch, again.Tag, again.VerifyAllowedSigners, again.VerifyMode = "", "v1.0.0", allowed, "tag"
	if _, err := again.Fetch(context.Background()); err == nil {
		t.Fatal("an unsigned tag is trusted")
	}
	repo.Git("-C", repo.Dir, "tag", "-f", "-s", "-m", "signed now", "v1.0.0")
	if _, err := again.Fetch(context.Background()); err != nil {
		t.Errorf("the tag signed again on the same commit: %v", err)
	}
	g := newGit(t, "file://"+repo.Dir)
	g.VerifyAllowedSigners, g.VerifyMode = allowed, "tag"
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "needs --tag or --semver") {
		t.Errorf("tag mode on a branch: %v", err)
	}
	g.VerifyMode, g.VerifyAllowedSigners = "ancestry", ""
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "need the keys") {
		t.Errorf("a mode without keys: %v", err)
	}
}

// gpgKey makes an OpenPGP key with gpg in a temp GNUPGHOME (set for the
// test, so git signs with it) and returns its id and armored public key.
func gpgKey(t *testing.T, email string) (id, keyring string) {
	if _, err := exec.LookPath("gpg"); err != nil {
		t.Skip("gpg not installed")
	}
	home, err := os.MkdirTemp("", "gpg") // short: gpg-agent's socket path is bounded
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("gpgconf", "--homedir", home, "--kill", "gpg-agent").Run()
		os.RemoveAll(home)
	})
	t.Setenv("GNUPGHOME", home)
	gpg := func(args ...string) string {
		out, err := exec.Command("gpg", append([]string{"--batch", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...).Output()
		if err != nil {
			t.Fatalf("gpg %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	gpg("--quick-gen-key", "Test <"+email+">", "ed25519", "sign", "never")
	for _, l := range strings.Split(gpg("--with-colons", "--list-secret-keys"), "\n") {
		if f := strings.Split(l, ":"); f[0] == "fpr" && id == "" {
			id = f[9]
		}
	}
	p := filepath.Join(t.TempDir(), "keyring.asc")
	if err := os.WriteFile(p, []byte(gpg("--armor", "--export", id)), 0o600); err != nil {
		t.Fatal(err)
	}
	return id, p
}

// TestVerifyOpenPGPAndSSH: commits signed by gpg and by an SSH key, with
// both a keyring and allowed signers given: a key of either is trusted;
// the committer match reads the OpenPGP key's identities.
func TestVerifyOpenPGPAndSSH(t *testing.T) {
	id, keyring := gpgKey(t, "test@example.com")
	alice := sshSigner(t, "alice", "ed25519")
	repo := gittest.NewRepo(t)
	repo.Git("-C", repo.Dir, "config", "gpg.format", "openpgp")
	repo.Git("-C", repo.Dir, "config", "user.signingkey", id)
	repo.Git("-C", repo.Dir, "config", "commit.gpgsign", "true")
	pgp := repo.Commit("by gpg", map[string]*string{"a": gittest.S("a")})
	signAs(repo, alice)
	ssh := repo.Commit("by ssh", map[string]*string{"a": gittest.S("b")})
	allowed := writeFile(t, "test@example.com "+alice.pub+"\n")
	mk := func(base string) *source.Git {
		g := newGit(t, "file://"+repo.Dir)
		g.VerifyKeyring, g.VerifyAllowedSigners, g.VerifyMode = keyring, allowed, "ancestry"
		g.Base = func() string { return base }
		return g
	}
	if _, err := mk("main@sha1:" + pgp).Fetch(context.Background()); err != nil {
		t.Fatalf("SSH-signed tip: %v", err)
	}
	repo.Git("-C", repo.Dir, "reset", "-q", "--hard", pgp)
	g := mk("")
	g.VerifyCommitterMatch = true
	if _, err := g.Fetch(context.Background()); err != nil {
		t.Fatalf("gpg-signed tip, the key's email is the committer's: %v", err)
	}
	repo.Git("-C", repo.Dir, "reset", "-q", "--hard", ssh)

	// The committer is not the key's identity.
	repo.Git("-C", repo.Dir, "config", "user.email", "mallory@example.com")
	repo.Git("-C", repo.Dir, "config", "gpg.format", "openpgp")
	repo.Git("-C", repo.Dir, "config", "user.signingkey", id)
	other := repo.Commit("by gpg, committed as mallory", map[string]*string{"a": gittest.S("c")})
	g = mk("main@sha1:" + ssh)
	g.VerifyCommitterMatch = true
	_, err := g.Fetch(context.Background())
	u := untrusted(t, err)
	if u.Object != "commit "+other || !strings.HasPrefix(u.Signer, "PGP key ") || !strings.Contains(u.Why, "not the committer mallory@example.com") {
		t.Errorf("%+v", u)
	}
	g = mk("main@sha1:" + ssh)
	g.VerifyKeyring = ""
	_, err = g.Fetch(context.Background())
	if u := untrusted(t, err); !strings.Contains(u.Why, "--verify-keyring, which is not given") {
		t.Errorf("gpg-signed without a keyring: %+v", u)
	}
}

// cpuTime is the process's user+sys CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkVerifyAncestry: a poll whose tip is 100 SSH-signed commits past
// the one the host runs (every one verified), beside the same poll in head
// mode (the tip only).
func BenchmarkVerifyAncestry(b *testing.B) {
	alice := sshSigner(b, "alice", "ed25519")
	repo := gittest.NewRepo(b)
	signAs(repo, alice)
	base := repo.Commit("base", map[string]*string{"a": gittest.S("0")})
	for i := range 100 {
		repo.Commit("change", map[string]*string{"a": gittest.S(string(rune('a' + i%26)))})
	}
	allowed := writeFile(b, "test@example.com "+alice.pub+"\n")
	for _, mode := range []string{"ancestry", "head"} {
		b.Run(mode, func(b *testing.B) {
			g := &source.Git{URL: "file://" + repo.Dir, Branch: "main", Cache: state.At(b.TempDir()), Timeout: 20 * time.Second}
			g.VerifyAllowedSigners, g.VerifyMode = allowed, mode
			g.Base = func() string { return "main@sha1:" + base }
			cpu0 := cpuTime()
			for b.Loop() {
				co, err := g.Fetch(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				co.Close()
			}
			// The first Loop iteration fetches the history; the CPU per
			// poll (user+sys) stands beside ns/op on a shared machine.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// TestVerifyAt: an earlier revision loaded from history (a rollback, a
// pin) is verified as head is, never by ancestry; the revision the host
// runs is not verified again.
func TestVerifyAt(t *testing.T) {
	alice := sshSigner(t, "alice", "ed25519")
	repo := gittest.NewRepo(t)
	signAs(repo, alice)
	first := repo.Commit("first", map[string]*string{"a": gittest.S("a")})
	signAs(repo, signer{})
	unsigned := repo.Commit("unsigned", map[string]*string{"a": gittest.S("b")})
	signAs(repo, alice)
	tip := repo.Commit("tip", map[string]*string{"a": gittest.S("c")})
	allowed := writeFile(t, "test@example.com "+alice.pub+"\n")
	g := newGit(t, "file://"+repo.Dir)
	g.VerifyAllowedSigners, g.VerifyMode = allowed, "ancestry"
	g.Base = func() string { return "main@sha1:" + tip }
	at := func(sha string) error {
		co, err := g.At(context.Background(), "main@sha1:"+sha)
		if err == nil {
			co.Close()
		}
		return err
	}
	if err := at(first); err != nil {
		t.Fatalf("a signed earlier revision: %v", err)
	}
	if u := untrusted(t, at(unsigned)); u.Object != "commit "+unsigned || u.Signer != "unsigned" {
		t.Errorf("rollback to an unsigned revision: %+v", u)
	}
	os.WriteFile(allowed, []byte("# alice left\n"), 0o600)
	if err := at(tip); err != nil {
		t.Errorf("the revision the host runs, its key removed since: %v", err)
	}
	if u := untrusted(t, at(first)); !strings.Contains(u.Why, "is not in") {
		t.Errorf("rollback to a revision by a removed key: %+v", u)
	}
	if g.VerifyMode != "ancestry" {
		t.Errorf("At left the mode at %q", g.VerifyMode)
	}
}
