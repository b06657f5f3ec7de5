package sops

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
)

// metadata is a file's "sops" entry: how its data key is wrapped and
// which values are encrypted.
type metadata struct {
	groups           [][]masterKey // key_groups, or the top-level keys as one group
	threshold        int
	lastModified     time.Time
	mac              string
	macOnlyEncrypted bool
	// one of the encryption rules, at most; unencrypted_suffix
	// "_unencrypted" when none is given.
	unencryptedSuffix, encryptedSuffix string
	unencryptedRegex, encryptedRegex   *regexp.Regexp
	unencryptedComment, encryptedCmt   *regexp.Regexp
}

// masterKey is one wrapping of the data key: an age recipient's, or
// another kind cortex-sync cannot use (kind only, for messages).
type masterKey struct {
	kind      string // "age", "pgp", "kms", ...
	recipient string
	enc       string
}

var keyKinds = []string{"age", "pgp", "kms", "gcp_kms", "azure_kv", "hc_vault", "hckms"}

// parseMetadata reads the metadata from its generic form (the "sops"
// mapping, or the unflattened sops_ keys of a dotenv file).
func parseMetadata(m map[string]any) (*metadata, error) {
	md := &metadata{}
	str := func(k string) (string, error) {
		switch v := m[k].(type) {
		case nil:
			return "", nil
		case string:
			return v, nil
		case time.Time:
			return v.Format(time.RFC3339), nil
		case int, float64, bool:
			return fmt.Sprint(v), nil
		}
		return "", fmt.Errorf("sops.%s is not a string", k)
	}
	var err error
	lm, err := str("lastmodified")
	if err != nil {
		return nil, err
	}
	if md.lastModified, err = time.Parse(time.RFC3339, lm); err != nil {
		return nil, fmt.Errorf("sops.lastmodified %q is not an RFC 3339 time", lm)
	}
	if md.mac, err = str("mac"); err != nil {
		return nil, err
	}
	if md.mac == "" {
		return nil, errors.New("sops.mac is missing")
	}
	switch v := m["mac_only_encrypted"].(type) {
	case nil:
	case bool:
		md.macOnlyEncrypted = v
	case string:
		if md.macOnlyEncrypted, err = strconv.ParseBool(v); err != nil {
			return nil, errors.New("sops.mac_only_encrypted is not a boolean")
		}
	default:
		return nil, errors.New("sops.mac_only_encrypted is not a boolean")
	}
	switch v := m["shamir_threshold"].(type) {
	case nil:
	case int:
		md.threshold = v
	case string:
		if md.threshold, err = strconv.Atoi(v); err != nil {
			return nil, errors.New("sops.shamir_threshold is not a number")
		}
	default:
		return nil, errors.New("sops.shamir_threshold is not a number")
	}
	rules := 0
	rule := func(k string) (string, error) {
		s, err := str(k)
		if s != "" {
			rules++
		}
		return s, err
	}
	re := func(k string) (*regexp.Regexp, error) {
		s, err := rule(k)
		if err != nil || s == "" {
			return nil, err
		}
		r, err := regexp.Compile(s)
		if err != nil {
			// sops ignores a regex that does not compile: it matches nothing.
			return regexp.MustCompile(`$.^`), nil
		}
		return r, nil
	}
	if md.unencryptedSuffix, err = rule("unencrypted_suffix"); err != nil {
		return nil, err
	}
	if md.encryptedSuffix, err = rule("encrypted_suffix"); err != nil {
		return nil, err
	}
	for k, p := range map[string]**regexp.Regexp{
		"unencrypted_regex": &md.unencryptedRegex, "encrypted_regex": &md.encryptedRegex,
		"unencrypted_comment_regex": &md.unencryptedComment, "encrypted_comment_regex": &md.encryptedCmt,
	} {
		if *p, err = re(k); err != nil {
			return nil, err
		}
	}
	switch {
	case rules > 1:
		return nil, errors.New("more than one of encrypted_suffix, unencrypted_suffix, encrypted_regex, unencrypted_regex, encrypted_comment_regex, unencrypted_comment_regex")
	case rules == 0:
		md.unencryptedSuffix = "_unencrypted"
	}
	if g, ok := m["key_groups"]; ok && g != nil {
		l, ok := g.([]any)
		if !ok {
			return nil, errors.New("sops.key_groups is not a list")
		}
		for i, g := range l {
			gm, ok := g.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("sops.key_groups[%d] is not a mapping", i)
			}
			keys, err := masterKeys(gm, fmt.Sprintf("sops.key_groups[%d].", i))
			if err != nil {
				return nil, err
			}
			md.groups = append(md.groups, keys)
		}
	} else {
		keys, err := masterKeys(m, "sops.")
		if err != nil {
			return nil, err
		}
		md.groups = [][]masterKey{keys}
	}
	return md, nil
}

func masterKeys(m map[string]any, at string) ([]masterKey, error) {
	var out []masterKey
	for _, kind := range keyKinds {
		v, ok := m[kind]
		if !ok || v == nil {
			continue
		}
		l, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("%s%s is not a list", at, kind)
		}
		for i, e := range l {
			em, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s%s[%d] is not a mapping", at, kind, i)
			}
			k := masterKey{kind: kind}
			if kind == "age" {
				r, _ := em["recipient"].(string)
				enc, _ := em["enc"].(string)
				if enc == "" {
					return nil, fmt.Errorf("%s%s[%d].enc is missing", at, kind, i)
				}
				k.recipient, k.enc = r, enc
			}
			out = append(out, k)
		}
	}
	return out, nil
}

// encrypted says whether sops encrypts the value at path p (under the
// comments cs), by the file's rule.
func (md *metadata) encrypted(p []string, cs stack, isComment bool) bool {
	enc := true
	anyPath := func(f func(string) bool) bool {
		for _, s := range p {
			if f(s) {
				return true
			}
		}
		return false
	}
	if md.unencryptedSuffix != "" && anyPath(func(s string) bool { return strings.HasSuffix(s, md.unencryptedSuffix) }) {
		enc = false
	}
	if md.encryptedSuffix != "" {
		enc = anyPath(func(s string) bool { return strings.HasSuffix(s, md.encryptedSuffix) })
	}
	if md.unencryptedRegex != nil && anyPath(md.unencryptedRegex.MatchString) {
		enc = false
	}
	if md.encryptedRegex != nil {
		enc = anyPath(md.encryptedRegex.MatchString)
	}
	if md.unencryptedComment != nil {
	un:
		for _, level := range cs {
			for _, c := range level {
				if md.unencryptedComment.MatchString(c) {
					enc = false
					break un
				}
			}
		}
	}
	if md.encryptedCmt != nil {
		enc = false
		last := len(cs) - 1
	en:
		for i, level := range cs {
			for j, c := range level {
				// the comment that matches is itself left in the clear
				if isComment && i == last && j == len(cs[last])-1 {
					continue
				}
				if md.encryptedCmt.MatchString(c) {
					enc = true
					break en
				}
			}
		}
	}
	return enc
}

// dataKey unwraps the file's data key with the host's age identities.
func (md *metadata) dataKey(keys *Keys) ([]byte, error) {
	if len(md.groups) > 1 {
		// sops splits the key with Shamir's scheme across groups (a
		// threshold of at least 2): each group holds a share, not the key.
		return nil, fmt.Errorf("the data key is split across %d key groups (shamir_threshold %d): not supported; encrypt the file for one key group", len(md.groups), md.threshold)
	}
	nf := &NotForThisHostError{}
	if keys != nil {
		nf.Host, nf.KeyFile = keys.Recipients(), keys.file
	}
	others := map[string]bool{}
	for _, g := range md.groups {
		for _, k := range g {
			if k.kind != "age" {
				others[k.kind] = true
				continue
			}
			nf.Recipients = append(nf.Recipients, k.recipient)
			if keys == nil || len(keys.identities) == 0 {
				continue
			}
			key, err := unwrap(k.enc, keys.identities)
			var none *age.NoIdentityMatchError
			switch {
			case errors.As(err, &none):
				continue
			case err != nil:
				return nil, fmt.Errorf("the data key for age recipient %s: %w", k.recipient, err)
			}
			if len(key) != 32 {
				return nil, fmt.Errorf("the data key for age recipient %s is %d bytes, not 32", k.recipient, len(key))
			}
			return key, nil
		}
	}
	for k := range others {
		nf.Others = append(nf.Others, k)
	}
	sort.Strings(nf.Others)
	return nil, nf
}

func unwrap(enc string, ids []age.Identity) ([]byte, error) {
	r, err := age.Decrypt(armor.NewReader(strings.NewReader(enc)), ids...)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(r, 1024)); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
