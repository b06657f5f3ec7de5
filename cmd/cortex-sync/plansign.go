package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"

	"github.com/cortex-sync/cortex-sync/pkg/trust"
)

// planNamespace is the SSH signature namespace of a saved plan: a
// signature made for Git commits (namespace "git") or for a file
// (ssh-keygen's default, "file") does not pass for a plan's, and the
// reverse.
const planNamespace = "cortex-sync-plan"

// sigName is where a saved plan's signature goes: beside it, named as
// ssh-keygen -Y sign names it, so either tool can make or check it.
func sigName(plan string) string { return plan + ".sig" }

// signSaved signs the plan file with an SSH private key, into plan.sig.
// A key behind a passphrase, a hardware key or an agent's is signed with
// by ssh-keygen itself: the same file results.
func signSaved(plan, keyFile string) error {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return fmt.Errorf("--sign-key: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return fmt.Errorf("--sign-key %s is protected by a passphrase: sign with ssh-keygen instead (it asks for it, or uses your agent): ssh-keygen -Y sign -n %s -f %s %s", keyFile, planNamespace, keyFile, plan)
	case err != nil:
		return fmt.Errorf("--sign-key %s: not an SSH private key: %w", keyFile, err)
	}
	data, err := os.ReadFile(plan)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	sig, err := sshsig.Sign(bytes.NewReader(data), signer, sshsig.HashSHA512, planNamespace)
	if err != nil {
		return fmt.Errorf("--sign-key %s: %w", keyFile, err)
	}
	if err := os.WriteFile(sigName(plan), sshsig.Armor(sig), 0o600); err != nil {
		return fmt.Errorf("--sign-key: %w", err)
	}
	return nil
}

// signOrUnsign signs a plan just written with key, or, without a key,
// removes a signature an earlier plan of that name left: it signed other
// bytes, and would only be refused.
func signOrUnsign(plan, key string) error {
	if key != "" {
		return signSaved(plan, key)
	}
	if err := os.Remove(sigName(plan)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--out: the signature of an earlier plan: %w", err)
	}
	return nil
}

// checkPlanSignature checks that a key of the allowed signers file signed
// exactly data, the plan read from name, for plans, now: it returns who
// signed, as "principal (fingerprint)".
func checkPlanSignature(name string, data []byte, signersFile string) (string, error) {
	signers, err := trust.LoadAllowedSigners(signersFile)
	if err != nil {
		return "", fmt.Errorf("--plan-signers: %w", err)
	}
	sig, err := os.ReadFile(sigName(name))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--plan %s is not signed (no %s), and --plan-signers applies only a signed plan: make it with diff --out %s --sign-key KEY, or sign it with ssh-keygen -Y sign -n %s -f KEY %s", name, sigName(name), name, planNamespace, name)
	}
	if err != nil {
		return "", fmt.Errorf("--plan: the signature: %w", err)
	}
	v, err := signers.Verify(data, sig, planNamespace, "", time.Now())
	switch {
	case errors.Is(err, trust.ErrWeakSignature):
		return "", fmt.Errorf("--plan %s: %w; sign with rsa-sha2-512 (ssh-keygen does) or an ed25519 key", sigName(name), err)
	case errors.Is(err, trust.ErrNotAllowed):
		return "", fmt.Errorf("--plan %s: signed by %s, which %s does not allow to sign plans (namespace %s): %w", sigName(name), fingerprintOf(sig), signersFile, planNamespace, err)
	case err != nil:
		return "", fmt.Errorf("--plan %s does not match %s: edited since it was signed, or signed for another use than a plan (namespace %s): %w", sigName(name), name, planNamespace, err)
	}
	return fmt.Sprintf("%s (%s)", strings.Join(v.Principals, ","), v.Fingerprint), nil
}

// fingerprintOf names the key that made a signature, for a refusal.
func fingerprintOf(armored []byte) string {
	s, err := trust.ParseSignature(armored)
	if err != nil {
		return "an unreadable key"
	}
	return "key " + s.Fingerprint()
}
