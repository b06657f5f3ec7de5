package driver

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/sops"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// SecretEnvFile is a SOPS-encrypted dotenv file of the repository whose
// variables a program gets as secrets: like secretEnv's, their values
// never enter the plan, the snapshot or the logs, output showing one is
// redacted as [redacted:NAME], and a change of the plaintext restarts the
// Process (re-runs the Command); a new encryption of the same plaintext
// does not.
type SecretEnvFile struct {
	Source  string `yaml:"source" json:"source"`
	Decrypt string `yaml:"decrypt" json:"decrypt"`

	sourcePath string
}

const secretEnvFileField = "spec.secretEnvFile"

func (f *SecretEnvFile) validate(v *resource.Validation) {
	if f == nil {
		return
	}
	switch {
	case f.Source == "":
		v.Errorf(secretEnvFileField+".source", "the repository's SOPS dotenv file is required")
	case sops.FormatOf(f.Source) != sops.Dotenv:
		v.Errorf(secretEnvFileField+".source", "%s is not a dotenv file (sops reads a name ending in .env as one)", f.Source)
	default:
		f.sourcePath = v.SourcePath(secretEnvFileField+".source", f.Source, false)
	}
	switch f.Decrypt {
	case "":
		v.Errorf(secretEnvFileField+".decrypt", "give decrypt: sops: a secret in Git must be encrypted")
	default:
		validDecrypt(v, secretEnvFileField+".decrypt", f.Decrypt)
	}
}

// sopsSources is the Exec's SOPS dotenv file, if any.
func (x *Exec) sopsSources() []sopsSource {
	if x.SecretEnvFile == nil {
		return nil
	}
	f := x.SecretEnvFile
	return []sopsSource{{field: secretEnvFileField + ".source", source: f.Source, path: f.sourcePath, check: func(plain []byte) error {
		vars, err := sops.ParseEnv(plain)
		if err == nil {
			_, err = x.envSecrets(vars)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.Source, err)
		}
		return nil
	}}}
}

// hasSecrets: the program gets secrets, from host files or the repository.
func (x *Exec) hasSecrets() bool { return len(x.SecretEnv) > 0 || x.SecretEnvFile != nil }

// readSecretEnvFile decrypts the Exec's SOPS dotenv file to secrets. A
// variable that clashes with env, secretEnv or cortex-sync's own is an
// error naming it, never its value.
func readSecretEnvFile(env *Env, x *Exec) ([]secret, error) {
	f := x.SecretEnvFile
	if f == nil {
		return nil, nil
	}
	fail := func(err error) ([]secret, error) {
		return nil, fmt.Errorf("%s: %w", secretEnvFileField, err)
	}
	b, err := readSOPS(func() (io.ReadCloser, error) { return env.Tree.Open(f.sourcePath) })
	if err != nil {
		return fail(fmt.Errorf("%s: %w", f.Source, err))
	}
	keys, err := env.decrypter().Keys()
	if err != nil {
		return fail(err)
	}
	vars, err := sops.DecryptEnv(f.Source, b, keys)
	if err != nil {
		return fail(err)
	}
	out, err := x.envSecrets(vars)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", f.Source, err))
	}
	return out, nil
}

// envSecrets are the variables of the Exec's SOPS dotenv file as secrets,
// checked as the plan and validate --decrypt check them: a name that is
// not one, or that clashes with env, secretEnv or cortex-sync's own, is an
// error naming it, never its value.
func (x *Exec) envSecrets(vars []sops.Var) ([]secret, error) {
	out := make([]secret, 0, len(vars))
	for _, v := range vars {
		bad := ""
		_, inEnv := x.Env[v.Name]
		_, inSecret := x.SecretEnv[v.Name]
		switch {
		case !envName.MatchString(v.Name):
			bad = "is not a valid environment variable name"
		case inEnv:
			bad = "is also in spec.env; give it in one of them"
		case inSecret:
			bad = "is also in spec.secretEnv; give it in one of them"
		case reservedEnv[v.Name]:
			bad = "is set by cortex-sync; choose another name"
		case strings.IndexByte(v.Value, 0) >= 0:
			bad = "holds a NUL byte, which an environment variable cannot"
		}
		if bad != "" {
			return nil, fmt.Errorf("variable %q %s", v.Name, bad)
		}
		out = append(out, secret{name: v.Name, path: x.SecretEnvFile.Source, value: v.Value})
	}
	return out, nil
}

// secretEnvFileDigest names the plaintext of the Exec's SOPS dotenv file,
// keyed; "" without one, or in a simulation (which has no keys).
func secretEnvFileDigest(env *Env, x *Exec) (string, error) {
	if x.SecretEnvFile == nil || env.Simulate || env.recalled() {
		return "", nil
	}
	id, err := env.decryptedID(x.SecretEnvFile.sourcePath, x.SecretEnvFile.Source)
	if err != nil {
		return "", fmt.Errorf("%s: %w", secretEnvFileField, err)
	}
	return "\nsecretEnvFile=" + id, nil
}

// sopsEnvSpec is what a supervisor needs to decrypt the Exec's SOPS
// dotenv file itself as it starts the process: its ciphertext (which Git
// holds anyway) and where the age key is. The plaintext is never written.
func sopsEnvSpec(env *Env, x *Exec) (*supervise.SOPSEnv, error) {
	f := x.SecretEnvFile
	if f == nil {
		return nil, nil
	}
	if _, err := readSecretEnvFile(env, x); err != nil {
		return nil, err // checked here, where the error reaches the plan and the report
	}
	b, err := readSOPS(func() (io.ReadCloser, error) { return env.Tree.Open(f.sourcePath) })
	if err != nil {
		return nil, err
	}
	d := env.decrypter()
	if d.keyFile == "" {
		return nil, errors.New(secretEnvFileField + ": no age key file")
	}
	keyFile, err := filepath.Abs(d.keyFile)
	if err != nil {
		return nil, err
	}
	return &supervise.SOPSEnv{Name: filepath.Base(f.Source), Data: string(b), AgeKeyFile: keyFile}, nil
}
