package sops

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"

	"filippo.io/age"
)

// Keys are a host's age identities: what it decrypts SOPS data keys with.
type Keys struct {
	file       string // where they were read from, for messages
	identities []age.Identity
	public     []string // the recipient of each X25519 identity
}

// maxKeyFile bounds an age identity file: a few lines each.
const maxKeyFile = 1 << 20

// ReadKeys reads an age identity file (as age-keygen writes it: comments
// and AGE-SECRET-KEY-1… lines), once. A file that group or others may
// read or write is refused, as ssh refuses a private key: whoever reads it
// reads every secret of the repository.
func ReadKeys(file string) (*Keys, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a fifo does not block
	if err != nil {
		return nil, fmt.Errorf("age key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("age key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("age key file %s is not a regular file", file)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("age key file %s is open to group or others (mode %04o); chmod 600 %s", file, perm, file)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("age key file: %w", err)
	}
	defer clear(b)
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("age key file %s is larger than %d bytes", file, maxKeyFile)
	}
	return ParseKeys(file, b)
}

// ParseKeys parses the content of an age identity file; file names it in
// errors. An error never quotes the content.
func ParseKeys(file string, b []byte) (*Keys, error) {
	ids, err := age.ParseIdentities(bytes.NewReader(b))
	if err != nil {
		// age's own message may quote a line: say only where.
		return nil, fmt.Errorf("age key file %s: not an age identity file (one AGE-SECRET-KEY-1… per line, # comments)", file)
	}
	k := &Keys{file: file, identities: ids}
	for _, id := range ids {
		if x, ok := id.(*age.X25519Identity); ok {
			k.public = append(k.public, x.Recipient().String())
		}
	}
	return k, nil
}

// File is where the keys were read from.
func (k *Keys) File() string {
	if k == nil {
		return ""
	}
	return k.file
}

// Recipients are the public keys of the identities: what a .sops.yaml
// must name for this host to decrypt.
func (k *Keys) Recipients() []string {
	if k == nil {
		return nil
	}
	return append([]string(nil), k.public...)
}
