package source

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// ErrUntrusted reports a revision whose signature does not check out.
var ErrUntrusted = errors.New("signature verification failed")

// verify checks the tip commit's PGP signature against the keyring, and
// with VerifyTags the tag's too. What is verified: the commit object that is
// applied (and its tag), not the history before it.
func (g *Git) verify(c *gitCache, commit *object.Commit, w *wanted) error {
	keyring, err := os.ReadFile(g.VerifyKeyring)
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	if _, err := openpgp.ReadArmoredKeyRing(strings.NewReader(string(keyring))); err != nil {
		return fmt.Errorf("keyring %s: not armored PGP public keys: %w", g.VerifyKeyring, err)
	}
	what := "commit " + commit.Hash.String()
	if err := checkSignature(what, commit.PGPSignature, func() (*openpgp.Entity, error) { return commit.Verify(string(keyring)) }); err != nil {
		return err
	}
	if !g.VerifyTags || !w.tag {
		return nil
	}
	tag, err := object.GetTag(c.storage, w.tip)
	if err != nil {
		return fmt.Errorf("%w: tag %s is a lightweight tag, which cannot carry a signature; use an annotated, signed tag", ErrUntrusted, w.name)
	}
	return checkSignature("tag "+w.name, tag.PGPSignature, func() (*openpgp.Entity, error) { return tag.Verify(string(keyring)) })
}

func checkSignature(what, sig string, verify func() (*openpgp.Entity, error)) error {
	switch {
	case sig == "":
		return fmt.Errorf("%w: %s is not signed", ErrUntrusted, what)
	case strings.Contains(sig, "BEGIN SSH SIGNATURE"):
		return fmt.Errorf("%w: %s has an SSH signature; SSH signatures are not supported, only PGP", ErrUntrusted, what)
	}
	if _, err := verify(); err != nil {
		return fmt.Errorf("%w: %s is signed by %s, which is not in the keyring (%v)", ErrUntrusted, what, issuer(sig), err)
	}
	return nil
}

// issuer names the key that made a signature, as well as it can be told.
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
