package trust

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Errors a refusal wraps, for errors.Is.
var (
	// ErrBadSignature: the signature does not parse or does not match the
	// message.
	ErrBadSignature = errors.New("bad signature")
	// ErrWeakSignature: an RSA signature over SHA-1 ("ssh-rsa"), which
	// OpenSSH refuses since 8.8 (and x/crypto would accept).
	ErrWeakSignature = errors.New("RSA signature over SHA-1 (ssh-rsa) refused")
	// ErrNotAllowed: no line of the allowed signers trusts the key for
	// this namespace, principal and time.
	ErrNotAllowed = errors.New("key not allowed")
)

// Verified says who signed.
type Verified struct {
	// Principals are the allowed signers' principals the signature stands
	// for: the line's pattern list for a plain key (as ssh-keygen -Y
	// find-principals prints it), the certificate's principals that the
	// line allows for a certificate.
	Principals []string
	// Fingerprint is the signing key's (a certificate's own key's)
	// SHA256 fingerprint, "SHA256:…".
	Fingerprint string
	// Line is the allowed signers line that trusted it: "file:line".
	Line string
}

// Signature is a parsed armored SSH signature.
type Signature struct {
	sig *sshsig.Signature
}

// ParseSignature reads an armored SSH signature ("-----BEGIN SSH
// SIGNATURE-----").
func ParseSignature(armored []byte) (*Signature, error) {
	if fp, ok := sha1RSA(armored); ok {
		return nil, fmt.Errorf("%w: key %s", ErrWeakSignature, fp)
	}
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return &Signature{sig: sig}, nil
}

// sha1RSA tells an RSA signature over SHA-1 apart before sshsig, which
// refuses it as a bad format, parses it: said plainly, the signer knows
// what to change (ssh-keygen 8.2 and later, or rsa-sha2-512).
func sha1RSA(armored []byte) (fingerprint string, ok bool) {
	block, _ := pem.Decode(armored)
	if block == nil || block.Type != sshsig.PEMType {
		return "", false
	}
	var wire struct {
		Magic     [6]byte
		Version   uint32
		PublicKey []byte
		Namespace string
		Reserved  string
		Hash      string
		Signature []byte
	}
	if ssh.Unmarshal(block.Bytes, &wire) != nil {
		return "", false
	}
	var sig struct {
		Format string
		Rest   []byte `ssh:"rest"`
	}
	if ssh.Unmarshal(wire.Signature, &sig) != nil || (sig.Format != ssh.KeyAlgoRSA && sig.Format != ssh.CertAlgoRSAv01) {
		return "", false
	}
	key, err := ssh.ParsePublicKey(wire.PublicKey)
	if err != nil {
		return "an unreadable key", true
	}
	if c, isCert := key.(*ssh.Certificate); isCert {
		key = c.Key
	}
	return ssh.FingerprintSHA256(key), true
}

// Fingerprint is the signing key's SHA256 fingerprint (a certificate's own
// key's), for messages.
func (s *Signature) Fingerprint() string {
	k := s.sig.PublicKey
	if c, ok := k.(*ssh.Certificate); ok {
		k = c.Key
	}
	return ssh.FingerprintSHA256(k)
}

// Check verifies the signature over message for namespace, without asking
// who made it: the format, the hash, the namespace, SHA-1 RSA and the
// mathematics.
func (s *Signature) Check(message []byte, namespace string) error {
	if f := s.sig.Signature.Format; f == ssh.KeyAlgoRSA || f == ssh.CertAlgoRSAv01 {
		return fmt.Errorf("%w: key %s", ErrWeakSignature, s.Fingerprint())
	}
	if s.sig.Namespace != namespace {
		return fmt.Errorf("%w: signed for namespace %q, not %q", ErrNotAllowed, s.sig.Namespace, namespace)
	}
	if err := sshsig.Verify(bytes.NewReader(message), s.sig, s.sig.PublicKey, s.sig.HashAlgorithm, namespace); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	return nil
}

// Verify checks an armored SSH signature over message for namespace at
// time at (git verifies at the committer time) and finds who it stands for,
// as ssh-keygen -Y verify does with -I principal. An empty principal
// accepts any principal the file allows the key (every matching line is
// collected).
func (a *AllowedSigners) Verify(message, armored []byte, namespace, principal string, at time.Time) (*Verified, error) {
	s, err := ParseSignature(armored)
	if err != nil {
		return nil, err
	}
	if err := s.Check(message, namespace); err != nil {
		return nil, err
	}
	var why []string
	var v *Verified
	for i := range a.Signers {
		l := &a.Signers[i]
		ps, err := l.allows(s.sig.PublicKey, namespace, principal, at)
		if err != nil {
			why = append(why, fmt.Sprintf("%s:%d: %v", l.File, l.Line, err))
			continue
		}
		if ps == nil {
			continue
		}
		if v == nil {
			v = &Verified{Fingerprint: s.Fingerprint(), Line: fmt.Sprintf("%s:%d", l.File, l.Line)}
		}
		v.Principals = append(v.Principals, ps...)
	}
	if v != nil {
		return v, nil
	}
	who := ""
	if principal != "" {
		who = fmt.Sprintf(" as %s", principal)
	}
	if len(why) == 0 {
		return nil, fmt.Errorf("%w: key %s is not in %s%s", ErrNotAllowed, s.Fingerprint(), a.File, who)
	}
	return nil, fmt.Errorf("%w: key %s%s: %s", ErrNotAllowed, s.Fingerprint(), who, strings.Join(why, "; "))
}

// FindPrincipals is ssh-keygen -Y find-principals: the principals of the
// first line that trusts the signature's key at time at, whatever the
// namespace. It does not check the signature.
func (a *AllowedSigners) FindPrincipals(armored []byte, at time.Time) ([]string, error) {
	s, err := ParseSignature(armored)
	if err != nil {
		return nil, err
	}
	for i := range a.Signers {
		ps, err := a.Signers[i].allows(s.sig.PublicKey, "", "", at)
		if err != nil || ps == nil {
			continue
		}
		return ps, nil
	}
	return nil, fmt.Errorf("%w: key %s is not in %s", ErrNotAllowed, s.Fingerprint(), a.File)
}

// allows is OpenSSH's check_allowed_keys_line: nil, nil when the line is
// not about this key (or principal); an error when it is but refuses it
// (namespace, time, certificate); else the principals it stands for. An
// empty namespace or principal is not checked.
func (l *Signer) allows(key ssh.PublicKey, namespace, principal string, at time.Time) ([]string, error) {
	if principal != "" && !MatchPatternList(principal, l.Principals) {
		return nil, nil
	}
	cert, isCert := key.(*ssh.Certificate)
	var principals []string
	switch {
	case !l.CertAuthority && bytes.Equal(key.Marshal(), l.Key.Marshal()):
		principals = []string{l.Principals}
	case l.CertAuthority && isCert && bytes.Equal(cert.SignatureKey.Marshal(), l.Key.Marshal()):
		if err := checkCert(cert, at); err != nil {
			return nil, err
		}
		for _, p := range cert.ValidPrincipals {
			if (principal == "" || p == principal) && MatchPatternList(p, l.Principals) {
				principals = append(principals, p)
			}
		}
		if len(principals) == 0 {
			if principal != "" {
				return nil, fmt.Errorf("certificate %q does not name principal %s (it names %s)", cert.KeyId, principal, strings.Join(cert.ValidPrincipals, ", "))
			}
			return nil, fmt.Errorf("certificate %q names no principal that %q allows (it names %s)", cert.KeyId, l.Principals, strings.Join(cert.ValidPrincipals, ", "))
		}
	default:
		return nil, nil
	}
	if namespace != "" && l.Namespaces != "" && !MatchPatternList(namespace, l.Namespaces) {
		return nil, fmt.Errorf("namespace %q is not allowed for this key (namespaces=%q)", namespace, l.Namespaces)
	}
	if !l.ValidAfter.IsZero() && at.Before(l.ValidAfter) {
		return nil, fmt.Errorf("key is not yet valid: signed %s, valid-after %s", at.UTC().Format(time.RFC3339), l.ValidAfter.UTC().Format(time.RFC3339))
	}
	if !l.ValidBefore.IsZero() && at.After(l.ValidBefore) {
		return nil, fmt.Errorf("key has expired: signed %s, valid-before %s", at.UTC().Format(time.RFC3339), l.ValidBefore.UTC().Format(time.RFC3339))
	}
	return principals, nil
}

// checkCert is what OpenSSH asks of a user certificate: signed by its CA
// (x/crypto does not check that when parsing), a user certificate, valid
// at time at, naming at least one principal.
func checkCert(c *ssh.Certificate, at time.Time) error {
	if c.CertType != ssh.UserCert {
		return fmt.Errorf("certificate %q is a host certificate, not a user one", c.KeyId)
	}
	if len(c.ValidPrincipals) == 0 {
		return fmt.Errorf("certificate %q names no principal", c.KeyId)
	}
	checker := &ssh.CertChecker{Clock: func() time.Time { return at }}
	// CheckCert checks the CA's signature, the validity window and the
	// critical options; the principal is matched by the caller.
	if err := checker.CheckCert(c.ValidPrincipals[0], c); err != nil {
		return fmt.Errorf("certificate %q: %v", c.KeyId, err)
	}
	return nil
}
