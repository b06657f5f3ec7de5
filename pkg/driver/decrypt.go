package driver

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/sops"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// DecryptSOPS is the value of a spec's decrypt field for a SOPS file.
const DecryptSOPS = "sops"

// validDecrypt checks a spec's decrypt field.
func validDecrypt(v *resource.Validation, field, value string) {
	if value != "" && value != DecryptSOPS {
		v.Errorf(field, "%q is not known; the one value is %q", value, DecryptSOPS)
	}
}

// Decrypter decrypts SOPS files of the desired tree with the host's age
// keys, read once, when first needed. It remembers the plaintext's
// content ID of each encrypted blob, so an observation of a File that did
// not change in Git decrypts nothing; plaintext itself is never kept.
type Decrypter struct {
	keyFile string
	once    sync.Once
	keys    *sops.Keys
	err     error

	mu  sync.Mutex
	ids map[string]string // encrypted content ID and format -> plaintext content ID
}

// maxDecryptedIDs bounds what the Decrypter remembers; past it, it forgets
// all and starts again.
const maxDecryptedIDs = 16384

// NewDecrypter decrypts with the age identities of keyFile ("": none; a
// file then cannot be decrypted, and says why).
func NewDecrypter(keyFile string) *Decrypter { return &Decrypter{keyFile: keyFile} }

// Keys are the host's age keys; nil when no key file is given.
func (d *Decrypter) Keys() (*sops.Keys, error) {
	d.once.Do(func() {
		if d.keyFile != "" {
			d.keys, d.err = sops.ReadKeys(d.keyFile)
		}
	})
	return d.keys, d.err
}

// Decrypt decrypts one SOPS file; name gives its format.
func (d *Decrypter) Decrypt(name string, data []byte) ([]byte, error) {
	keys, err := d.Keys()
	if err != nil {
		return nil, err
	}
	return sops.Decrypt(name, data, keys)
}

func (env *Env) decrypter() *Decrypter {
	if env.Decrypter != nil {
		return env.Decrypter
	}
	return NewDecrypter("")
}

// readSOPS reads a SOPS file of the tree, refusing one over the cap.
func readSOPS(open func() (io.ReadCloser, error)) ([]byte, error) {
	rc, err := open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, sops.MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > sops.MaxSize {
		return nil, sops.ErrTooLarge
	}
	return b, nil
}

// decryptFile decrypts the tree's file at p (name for its format and for
// errors).
func (env *Env) decryptFile(p, name string) ([]byte, error) {
	b, err := readSOPS(func() (io.ReadCloser, error) { return env.Tree.Open(p) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return env.decrypter().Decrypt(name, b)
}

// decryptedID is the content ID of the plaintext of the tree's SOPS file
// at p, keyed with the host key: a change of the plaintext is a change, a
// new encryption of the same plaintext (a key rotation) is not.
func (env *Env) decryptedID(p, name string) (string, error) {
	enc, err := env.Tree.ContentID(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	d := env.decrypter()
	key := enc + " " + sops.FormatOf(name).String()
	d.mu.Lock()
	id, ok := d.ids[key]
	d.mu.Unlock()
	if !ok {
		plain, err := env.decryptFile(p, name)
		if err != nil {
			return "", err
		}
		id = source.ContentDigest(plain)
		clear(plain)
		d.mu.Lock()
		if d.ids == nil || len(d.ids) >= maxDecryptedIDs {
			d.ids = map[string]string{}
		}
		d.ids[key] = id
		d.mu.Unlock()
	}
	return env.keyed(id)
}

// plaintext reads decrypted bytes and zeroes them when closed.
type plaintext struct {
	*bytes.Reader
	b []byte
}

func (p *plaintext) Close() error {
	clear(p.b)
	return nil
}

// sopsSource is a SOPS file a spec decrypts: the field naming it, as
// given, and its repository path.
type sopsSource struct {
	field, source, path string
	// check, if set, is what the plan checks of the plaintext beyond
	// decrypting it (a dotenv file's variable names); validate --decrypt
	// runs it too. Its error names the source, never a value.
	check func(plain []byte) error
}

// encrypted is a spec that decrypts SOPS files of the repository.
type encrypted interface {
	sopsSources() []sopsSource
}

// CheckDecrypt decrypts, with the host's keys, every SOPS file the set's
// specs would (validate --decrypt), touching nothing: each that does not
// is a problem naming the manifest, the resource, the field and why. It
// returns how many files decrypted.
func CheckDecrypt(tree source.Tree, set *resource.Set, d *Decrypter) (int, error) {
	env := &Env{Tree: tree, Decrypter: d}
	n := 0
	var problems resource.Problems
	for _, r := range set.Resources() {
		e, ok := r.Spec.(encrypted)
		if !ok {
			continue
		}
		for _, s := range e.sopsSources() {
			plain, err := env.decryptFile(s.path, s.source)
			if err == nil && s.check != nil {
				err = s.check(plain)
			}
			clear(plain)
			if err != nil {
				problems = append(problems, &resource.FieldError{Origin: r.Origin, Line: r.Origin.Line, ID: r.ID(), Field: s.field, Msg: err.Error()})
				continue
			}
			n++
		}
	}
	if len(problems) > 0 {
		return n, problems
	}
	return n, nil
}
