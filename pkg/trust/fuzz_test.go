package trust

import (
	"testing"
	"time"
)

// FuzzParseAllowedSigners: any file parses or is refused with an error,
// never a panic; what parses can be asked about a signature (a bad one)
// without a panic either.
func FuzzParseAllowedSigners(f *testing.F) {
	for _, seed := range []string{
		"",
		"# comment\n\n",
		`alice@example.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl`,
		`"a b",*@example.com,!bob@example.com namespaces="git,file",valid-after="20240101",valid-before="20301231235959Z" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl comment`,
		`*.example.com cert-authority ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl`,
		`x namespaces="unterminated ssh-ed25519 AAAA`,
		"a\r\nb ssh-rsa AAAA\n",
	} {
		f.Add([]byte(seed))
	}
	sig := []byte("-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n")
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAllowedSigners("allowed_signers", data)
		if err != nil {
			return
		}
		a.Verify([]byte("message"), sig, "git", "", time.Unix(1700000000, 0))
		a.FindPrincipals(sig, time.Unix(1700000000, 0))
		for _, s := range a.Signers {
			MatchPatternList("alice@example.com", s.Principals)
		}
	})
}
