package source

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/cortex-sync/cortex-sync/pkg/trust"
)

// ErrUntrusted reports a revision whose signature does not check out.
var ErrUntrusted = errors.New("signature verification failed")

// The verification modes (Git.VerifyMode).
const (
	VerifyHead       = "head"         // the tip commit
	VerifyTag        = "tag"          // the annotated tag (with Tag or Semver)
	VerifyTagAndHead = "tag-and-head" // both
	VerifyAncestry   = "ancestry"     // every commit since the applied one
)

// VerifyModes lists the modes, for flags and messages.
var VerifyModes = []string{VerifyHead, VerifyTag, VerifyTagAndHead, VerifyAncestry}

// AncestryBound is how many first-parent commits ancestry mode checks from
// the new tip back to the applied commit: further, the applied commit is
// taken as gone (a force-push) and the revision refused.
const AncestryBound = 1000

// sshNamespace is the namespace git signs commits and tags in.
const sshNamespace = "git"

// UntrustedError is a revision refused for its signatures: which commit
// (or tag), who signed it, and why it is not trusted.
type UntrustedError struct {
	Revision string // the revision refused: "main@sha1:…"
	// Object is what was refused: "commit <sha>", "tag v1.2.0".
	Object string
	// Signer is "unsigned", "SSH key SHA256:… (alice@example.com)" or
	// "PGP key 0123456789ABCDEF".
	Signer string
	Why    string
}

func (e *UntrustedError) Error() string {
	if e.Signer == "" {
		return fmt.Sprintf("untrusted revision %s: %s: %s", e.Revision, e.Object, e.Why)
	}
	if e.Signer == "unsigned" {
		return fmt.Sprintf("untrusted revision %s: %s is not signed: %s", e.Revision, e.Object, e.Why)
	}
	return fmt.Sprintf("untrusted revision %s: %s is signed by %s: %s", e.Revision, e.Object, e.Signer, e.Why)
}

func (e *UntrustedError) Unwrap() error { return ErrUntrusted }

// verifying reports whether commits are verified at all.
func (g *Git) verifying() bool { return g.VerifyKeyring != "" || g.VerifyAllowedSigners != "" }

// mode is the verification mode in effect.
func (g *Git) mode() string {
	switch {
	case g.VerifyMode != "":
		return g.VerifyMode
	case g.VerifyTags:
		return VerifyTagAndHead
	}
	return VerifyHead
}

// checkVerify validates the verification settings (from Check).
func (g *Git) checkVerify() error {
	known := false
	for _, m := range VerifyModes {
		known = known || g.VerifyMode == m
	}
	switch {
	case g.VerifyMode != "" && !known:
		return fmt.Errorf("--verify-mode %q: give one of %s", g.VerifyMode, strings.Join(VerifyModes, ", "))
	case g.VerifyTags && g.VerifyMode != "" && g.VerifyMode != VerifyTagAndHead:
		return fmt.Errorf("--verify-tags is --verify-mode %s: it cannot go with --verify-mode %s", VerifyTagAndHead, g.VerifyMode)
	case !g.verifying() && (g.VerifyMode != "" || g.VerifyTags || g.VerifyCommitterMatch):
		return errors.New("--verify-mode, --verify-tags and --verify-committer-match need the keys to verify with: --verify-allowed-signers (SSH) or --verify-keyring (OpenPGP)")
	case (g.mode() == VerifyTag || g.mode() == VerifyTagAndHead) && g.Tag == "" && g.Semver == "":
		return fmt.Errorf("--verify-mode %s verifies a tag: it needs --tag or --semver", g.mode())
	}
	return nil
}

// base is the commit the host runs, from Base; zero when none.
func (g *Git) base() plumbing.Hash {
	_, sha := g.baseRevision()
	return sha
}

func (g *Git) baseRevision() (string, plumbing.Hash) {
	if g.Base == nil {
		return "", plumbing.ZeroHash
	}
	rev := g.Base()
	name, sha, ok := strings.Cut(rev, "@sha1:")
	if !ok {
		name, sha = "", rev
	}
	if !isSHA1(sha) {
		return "", plumbing.ZeroHash
	}
	return name, plumbing.NewHash(sha)
}

// verify checks what the mode asks of the fetched revision. The revision
// the host runs is not verified again (it was when applied: a key removed
// since refuses new commits, never what runs). deepen fetches the ref's
// whole history into a shallow cache, for ancestry.
func (g *Git) verify(c *gitCache, commit *object.Commit, w *wanted, deepen func() error) error {
	roots, err := g.loadTrust()
	if err != nil {
		return err
	}
	rev := w.name + "@sha1:" + w.commit.String()
	baseName, base := g.baseRevision()
	if base == w.commit {
		return nil
	}
	fail := func(e *UntrustedError) error {
		e.Revision = rev
		return e
	}
	mode := g.mode()
	if (mode == VerifyTag || mode == VerifyTagAndHead) && w.tag {
		if w.tip == w.commit {
			return fail(&UntrustedError{Object: "tag " + w.name, Signer: "unsigned", Why: "a lightweight tag cannot carry a signature; use an annotated, signed tag"})
		}
		tag, err := object.GetTag(g.objects(), w.tip)
		if err != nil {
			return &corruptCacheError{fmt.Errorf("tag %s (%s): %w", w.name, w.tip, err)}
		}
		if e := roots.check(tagSigned(tag, w.name)); e != nil {
			return fail(e)
		}
	}
	switch mode {
	case VerifyTag:
		return nil
	case VerifyAncestry:
		// A branch's base from another branch (the configuration changed)
		// says nothing of this one's history: the tip only.
		if !base.IsZero() && (w.tag || baseName == "" || baseName == w.name) {
			if e := g.verifyAncestry(c, commit, base, roots, deepen); e != nil {
				return fail(e)
			}
			return nil
		}
	}
	if e := roots.check(commitSigned(commit)); e != nil {
		return fail(e)
	}
	return nil
}

// verifyAncestry checks every commit from the tip, first parent by first
// parent, down to base (excluded), at most AncestryBound of them.
func (g *Git) verifyAncestry(c *gitCache, tip *object.Commit, base plumbing.Hash, roots *trustRoots, deepen func() error) *UntrustedError {
	gone := func(why string) *UntrustedError {
		return &UntrustedError{Object: "commit " + tip.Hash.String(), Why: fmt.Sprintf(
			"the commit this host runs, %s, %s (a force-push or a rewritten history): "+
				"review the new history, then accept it deliberately with one `cortex-sync sync --verify-mode head` "+
				"(it verifies the tip only); from then on ancestry checks from the commit applied", base, why)}
	}
	deepened := false
	cur := tip
	for n := 0; ; n++ {
		if cur.Hash == base {
			return nil
		}
		if n == AncestryBound {
			return gone(fmt.Sprintf("is not among the %d first-parent ancestors of the tip", AncestryBound))
		}
		if e := roots.check(commitSigned(cur)); e != nil {
			if n > 0 {
				below := fmt.Sprintf("%d first-parent commits", n)
				if n == 1 {
					below = "1 first-parent commit"
				}
				e.Why += fmt.Sprintf(" (it is %s below the tip; --verify-mode ancestry checks every commit since %s)", below, base)
			}
			return e
		}
		if len(cur.ParentHashes) == 0 {
			return gone("is not a first-parent ancestor of the tip")
		}
		parent, err := object.GetCommit(g.objects(), cur.ParentHashes[0])
		if err != nil && !deepened && isShallow(c) {
			deepened = true
			if err := deepen(); err != nil {
				return &UntrustedError{Object: "commit " + cur.Hash.String(), Why: fmt.Sprintf("cannot fetch its parents to check them: %v", err)}
			}
			parent, err = object.GetCommit(g.objects(), cur.ParentHashes[0])
		}
		if err != nil {
			return gone(fmt.Sprintf("cannot be reached: commit %s, the parent of %s, is not in the cache (%v)", cur.ParentHashes[0], cur.Hash, err))
		}
		cur = parent
	}
}

// trustRoots are the keys of one verification, read again on every fetch:
// a key removed from a file refuses what it signs at the next fetch.
type trustRoots struct {
	keyring      string // armored OpenPGP keys, "" when not given
	keyringFile  string
	signers      *trust.AllowedSigners
	committer    bool // the signer must be the committer (tagger)
	signersGiven bool
}

func (g *Git) loadTrust() (*trustRoots, error) {
	r := &trustRoots{committer: g.VerifyCommitterMatch, keyringFile: g.VerifyKeyring}
	if g.VerifyKeyring != "" {
		b, err := os.ReadFile(g.VerifyKeyring)
		if err != nil {
			return nil, fmt.Errorf("--verify-keyring: %w", err)
		}
		if _, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(b)); err != nil {
			return nil, fmt.Errorf("--verify-keyring %s: not armored PGP public keys: %w", g.VerifyKeyring, err)
		}
		r.keyring = string(b)
	}
	if g.VerifyAllowedSigners != "" {
		s, err := trust.LoadAllowedSigners(g.VerifyAllowedSigners)
		if err != nil {
			return nil, fmt.Errorf("--verify-allowed-signers: %w", err)
		}
		r.signers, r.signersGiven = s, true
	}
	return r, nil
}

// signed is one signed object: a commit or a tag.
type signed struct {
	what      string // "commit <sha>", "tag v1"
	signature string
	encode    func(plumbing.EncodedObject) error // the object without its signature
	email     string                             // the committer's (tagger's) email
	when      time.Time
	verifyPGP func(keyring string) (*openpgp.Entity, error)
}

func commitSigned(c *object.Commit) *signed {
	return &signed{
		what: "commit " + c.Hash.String(), signature: c.PGPSignature,
		encode: c.EncodeWithoutSignature, email: c.Committer.Email, when: c.Committer.When,
		verifyPGP: c.Verify,
	}
}

func tagSigned(t *object.Tag, name string) *signed {
	return &signed{
		what: "tag " + name, signature: t.PGPSignature,
		encode: t.EncodeWithoutSignature, email: t.Tagger.Email, when: t.Tagger.When,
		verifyPGP: t.Verify,
	}
}

// check verifies one object's signature; the error is an *UntrustedError
// but for its Revision, which the caller fills.
func (r *trustRoots) check(s *signed) *UntrustedError {
	refuse := func(signer, format string, args ...any) *UntrustedError {
		return &UntrustedError{Object: s.what, Signer: signer, Why: fmt.Sprintf(format, args...)}
	}
	switch {
	case s.signature == "":
		return refuse("unsigned", "a signature by a trusted key is required")
	case strings.Contains(s.signature, "-----BEGIN SSH SIGNATURE-----"):
		return r.checkSSH(s, refuse)
	}
	return r.checkPGP(s, refuse)
}

func (r *trustRoots) checkSSH(s *signed, refuse func(string, string, ...any) *UntrustedError) *UntrustedError {
	sig, err := trust.ParseSignature([]byte(s.signature))
	if errors.Is(err, trust.ErrWeakSignature) {
		return refuse("an SSH RSA key", "%v; sign with rsa-sha2-512 (any OpenSSH since 8.2 does) or an ed25519 key", err)
	}
	if err != nil {
		return refuse("an unreadable SSH signature", "%v", err)
	}
	signer := "SSH key " + sig.Fingerprint()
	if !r.signersGiven {
		return refuse(signer, "SSH signatures are verified against --verify-allowed-signers, which is not given")
	}
	msg, err := encoded(s.encode)
	if err != nil {
		return refuse(signer, "cannot encode the %s: %v", s.what, err)
	}
	principal := ""
	if r.committer {
		principal = s.email
	}
	_, err = r.signers.Verify(msg, []byte(s.signature), sshNamespace, principal, s.when)
	if err != nil {
		if r.committer && errors.Is(err, trust.ErrNotAllowed) {
			if v2, err2 := r.signers.Verify(msg, []byte(s.signature), sshNamespace, "", s.when); err2 == nil {
				return refuse(signer+" ("+strings.Join(v2.Principals, ", ")+")", "the signer is not the committer %s (--verify-committer-match)", s.email)
			}
		}
		return refuse(signer, "%v", err)
	}
	return nil
}

func (r *trustRoots) checkPGP(s *signed, refuse func(string, string, ...any) *UntrustedError) *UntrustedError {
	signer := issuer(s.signature)
	if strings.HasPrefix(signer, "key ") {
		signer = "PGP " + signer
	} else {
		signer = "an OpenPGP signature by " + signer
	}
	if r.keyring == "" {
		return refuse(signer, "OpenPGP signatures are verified against --verify-keyring, which is not given")
	}
	e, err := s.verifyPGP(r.keyring)
	if err != nil {
		return refuse(signer, "not a valid signature by a key in %s (%v)", r.keyringFile, err)
	}
	if r.committer {
		for _, id := range e.Identities {
			if id.UserId != nil && strings.EqualFold(id.UserId.Email, s.email) {
				return nil
			}
		}
		var emails []string
		for _, id := range e.Identities {
			if id.UserId != nil {
				emails = append(emails, id.UserId.Email)
			}
		}
		return refuse(signer+" ("+strings.Join(emails, ", ")+")", "the key's identities are not the committer %s (--verify-committer-match)", s.email)
	}
	return nil
}

// encoded is an object's bytes as signed: encoded without its signature.
func encoded(encode func(plumbing.EncodedObject) error) ([]byte, error) {
	o := &plumbing.MemoryObject{}
	if err := encode(o); err != nil {
		return nil, err
	}
	rd, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

// issuer names the key that made a PGP signature, as well as it can be told.
func issuer(sig string) string {
	block, err := armor.Decode(strings.NewReader(sig))
	if err != nil {
		return "an unreadable key"
	}
	p, err := packet.Read(block.Body)
	if err != nil {
		return "an unreadable key"
	}
	if s, ok := p.(*packet.Signature); ok && s.IssuerKeyId != nil {
		return fmt.Sprintf("key %016X", *s.IssuerKeyId)
	}
	return "an unknown key"
}
