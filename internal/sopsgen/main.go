// Command sopsgen makes the SOPS fixtures of pkg/sops with the real sops
// library: each encrypted file beside the library's own decryption of it
// (NAME.plain), which pkg/sops must reproduce byte for byte. It is its own
// module so that the main build never compiles sops' cloud KMS SDKs.
//
//	go run . ../../pkg/sops/testdata   (make sops-fixtures)
//	go run . ../../pkg/sops/testdata many.yaml   (only the files named)
package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"filippo.io/age"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/cmd/sops/common"
	"github.com/getsops/sops/v3/cmd/sops/formats"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/decrypt"
	"github.com/getsops/sops/v3/keys"
	"github.com/getsops/sops/v3/version"
)

// varsYAML is a flat vars file, its one secret found nowhere else.
const varsYAML = `db_password: Zq8-vars-s3cret
db_user: shop
`

const basicYAML = `# A head comment
database:
    host: db.internal # inline comment
    port: 5432
    ratio: 0.75
    enabled: true
    password: s3cr3t-p4ss
    replicas:
        - name: r1
          weight: 1
        - name: r2 # second
          weight: 2.5
    # a comment between keys
    tags: [a, b, c]
motd: |
    Welcome,
    friend.
    Line three.
api_key_unencrypted: visible-value
empty: ""
nothing: null
# a foot comment
`

const regexYAML = `app:
    name: demo
    password: hunter2
    data: top-secret
    replicas: 3
`

const suffixYAML = `token_secret: abc123
token_plain: not-secret
nested:
    key_secret: nested-secret
    other: shown
`

const commentRegexYAML = `# sops:enc
password: hidden
user: shown
`

const multiDocYAML = `first: one
secret: a
---
second: two
secret: b
`

const basicJSON = `{
    "name": "demo",
    "password": "p<a>s&s",
    "port": 8080,
    "ratio": 1.5,
    "big": 12345678901,
    "on": false,
    "none": null,
    "list": [1, "two", 3.25, true, {"k": "v"}, []],
    "nested": {"a": {"b": "deep"}, "empty": {}},
    "user_unencrypted": "plain"
}
`

const appEnv = `# app settings
DATABASE_URL=postgres://app:pa55@db/app
API_TOKEN=tok-123456
MULTI=line1\nline2
#another comment
EMPTY=
PLAIN_unencrypted=visible
`

type gen struct {
	dir         string
	host, other *age.X25519Identity
	only        map[string]bool // the fixtures to write (with their .plain); all if empty
}

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: sopsgen DIR [NAME...]")
	}
	g := &gen{dir: os.Args[1], only: map[string]bool{}}
	for _, name := range os.Args[2:] {
		g.only[name] = true
	}
	// The keys of an earlier run are kept: a fixture added later is made
	// for the same hosts, and the others' ciphertext alone changes.
	g.host, g.other = g.identity("host.agekey"), g.identity("other.agekey")
	g.write("host.agekey", []byte(fmt.Sprintf("# public key: %s\n%s\n", g.host.Recipient(), g.host)))
	g.write("other.agekey", []byte(fmt.Sprintf("# public key: %s\n%s\n", g.other.Recipient(), g.other)))
	os.Setenv("SOPS_AGE_KEY_FILE", filepath.Join(g.dir, "host.agekey"))

	host, other := []string{g.host.Recipient().String()}, []string{g.other.Recipient().String()}
	both := append(append([]string{}, host...), other...)
	bin := []byte("binary \x00\x01\x02\xff\xfe secret\nwith lines\n")

	g.good("basic.yaml", basicYAML, host, sops.Metadata{})
	g.good("rotated.yaml", basicYAML, host, sops.Metadata{}) // the same plaintext, another data key
	g.good("two-recipients.yaml", basicYAML, both, sops.Metadata{})
	g.good("regex.yaml", regexYAML, host, sops.Metadata{EncryptedRegex: "^(password|data)$"})
	g.good("suffix.yaml", suffixYAML, host, sops.Metadata{EncryptedSuffix: "_secret"})
	g.good("unsuffix.yaml", suffixYAML, host, sops.Metadata{UnencryptedSuffix: "_plain"})
	g.good("maconly.yaml", basicYAML, host, sops.Metadata{MACOnlyEncrypted: true})
	g.good("comment-regex.yaml", commentRegexYAML, host, sops.Metadata{EncryptedCommentRegex: "sops:enc"})
	g.good("multidoc.yaml", multiDocYAML, host, sops.Metadata{})
	g.good("basic.json", basicJSON, host, sops.Metadata{})
	g.good("app.env", appEnv, host, sops.Metadata{})
	g.good("rotated.env", appEnv, host, sops.Metadata{})
	g.good("changed.env", strings.Replace(appEnv, "tok-123456", "tok-999999", 1), host, sops.Metadata{})
	// dotenv files that decrypt but that no program may get: a variable
	// cortex-sync sets, a name that is not one, a key given twice
	g.good("reserved.env", "APP_MODE=prod\nPATH=/tmp/evil\n", host, sops.Metadata{})
	g.good("badname.env", "1BAD=x\n", host, sops.Metadata{})
	g.good("dup.env", "TOKEN=first-dup-value\nOTHER=1\nTOKEN=second-dup-value\n", host, sops.Metadata{})
	g.good("vars.yaml", varsYAML, host, sops.Metadata{}) // a vars file (substitution)
	g.good("vars-rotated.yaml", varsYAML, host, sops.Metadata{})
	g.good("secret.bin", string(bin), host, sops.Metadata{})
	g.good("rotated.bin", string(bin), host, sops.Metadata{})

	// Refused: for another host; split across key groups; tampered.
	g.bad("other.yaml", basicYAML, other, sops.Metadata{})
	g.bad("other.env", appEnv, other, sops.Metadata{})
	g.shamir("shamir.yaml", regexYAML)
	basic := g.read("basic.yaml")
	// a value outside the encryption changed: only the MAC can tell
	g.write("tampered-unencrypted.yaml", replaceOnce(basic, "visible-value", "forged-value"))
	// an encrypted entry dropped
	g.write("tampered-removed.yaml", dropLine(basic, "    port: ENC["))
	// a ciphertext changed: its GCM tag fails
	g.write("tampered-value.yaml", flipData(basic, "    password: ENC[AES256_GCM,data:"))
	g.write("tampered-unencrypted.env", replaceOnce(g.read("app.env"), "PLAIN_unencrypted=visible", "PLAIN_unencrypted=forged"))
	g.write("tampered-unencrypted.json", replaceOnce(g.read("basic.json"), `"plain"`, `"forged"`))
	// 1 MiB, for the benchmarks: one binary value; 1,024 YAML values of 1 KiB
	g.write("big.bin", g.encrypt("big.bin", string(bytes.Repeat([]byte("0123456789abcdef"), 64<<10)), host, sops.Metadata{}))
	var big strings.Builder
	for i := range 1024 {
		fmt.Fprintf(&big, "key%04d: %s\n", i, bytes.Repeat([]byte("x"), 1024))
	}
	g.write("big.yaml", g.encrypt("big.yaml", big.String(), host, sops.Metadata{}))
	// many small values, for the benchmark that keeps YAML decryption linear
	var many strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&many, "k%06d: v\n", i)
	}
	g.good("many.yaml", many.String(), host, sops.Metadata{})
}

func (g *gen) good(name, plain string, recipients []string, md sops.Metadata) {
	enc := g.encrypt(name, plain, recipients, md)
	g.write(name, enc)
	out, err := decrypt.DataWithFormat(enc, formats.FormatForPath(name))
	if err != nil {
		log.Fatalf("%s: the library cannot decrypt it: %v", name, err)
	}
	g.write(name+".plain", out)
}

func (g *gen) bad(name, plain string, recipients []string, md sops.Metadata) {
	g.write(name, g.encrypt(name, plain, recipients, md))
}

func (g *gen) store(name string) common.Store {
	return common.StoreForFormat(formats.FormatForPath(name), config.NewStoresConfig())
}

func (g *gen) encrypt(name, plain string, recipients []string, md sops.Metadata) []byte {
	var group sops.KeyGroup
	for _, r := range recipients {
		k, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			log.Fatal(err)
		}
		group = append(group, k)
	}
	md.KeyGroups = []sops.KeyGroup{group}
	return g.encryptGroups(name, plain, md)
}

func (g *gen) encryptGroups(name, plain string, md sops.Metadata) []byte {
	st := g.store(name)
	branches, err := st.LoadPlainFile([]byte(plain))
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	if md.UnencryptedSuffix == "" && md.EncryptedSuffix == "" && md.EncryptedRegex == "" &&
		md.UnencryptedRegex == "" && md.EncryptedCommentRegex == "" && md.UnencryptedCommentRegex == "" {
		md.UnencryptedSuffix = sops.DefaultUnencryptedSuffix
	}
	md.Version = version.Version
	tree := sops.Tree{Branches: branches, Metadata: md, FilePath: name}
	dataKey := make([]byte, 32)
	if _, err := rand.Read(dataKey); err != nil {
		log.Fatal(err)
	}
	if errs := tree.Metadata.UpdateMasterKeys(dataKey); len(errs) > 0 {
		log.Fatalf("%s: %v", name, errs)
	}
	if err := common.EncryptTree(common.EncryptTreeOpts{DataKey: dataKey, Tree: &tree, Cipher: aes.NewCipher()}); err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	out, err := st.EmitEncryptedFile(tree)
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	return out
}

func (g *gen) shamir(name, plain string) {
	var groups []sops.KeyGroup
	for _, id := range []*age.X25519Identity{g.host, g.other} {
		k, err := sopsage.MasterKeyFromRecipient(id.Recipient().String())
		if err != nil {
			log.Fatal(err)
		}
		groups = append(groups, sops.KeyGroup{keys.MasterKey(k)})
	}
	g.write(name, g.encryptGroups(name, plain, sops.Metadata{KeyGroups: groups, ShamirThreshold: 2}))
}

func (g *gen) write(name string, b []byte) {
	if len(g.only) > 0 && !g.only[strings.TrimSuffix(name, ".plain")] {
		return
	}
	if err := os.WriteFile(filepath.Join(g.dir, name), b, 0o644); err != nil {
		log.Fatal(err)
	}
}

func (g *gen) read(name string) []byte {
	b, err := os.ReadFile(filepath.Join(g.dir, name))
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func replaceOnce(b []byte, old, new string) []byte {
	if !bytes.Contains(b, []byte(old)) {
		log.Fatalf("tamper: %q not found", old)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

func dropLine(b []byte, prefix string) []byte {
	var out []string
	dropped := false
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !dropped && strings.HasPrefix(l, prefix) {
			dropped = true
			continue
		}
		out = append(out, l)
	}
	if !dropped {
		log.Fatalf("tamper: no line %q", prefix)
	}
	return []byte(strings.Join(out, ""))
}

// flipData changes the first base64 character of a value's ciphertext.
func flipData(b []byte, prefix string) []byte {
	i := bytes.Index(b, []byte(prefix))
	if i < 0 {
		log.Fatalf("tamper: no %q", prefix)
	}
	j := i + len(prefix)
	out := append([]byte{}, b...)
	if out[j] == 'A' {
		out[j] = 'B'
	} else {
		out[j] = 'A'
	}
	return out
}

// identity reads the age identity of an earlier run from name, or makes one.
func (g *gen) identity(name string) *age.X25519Identity {
	if b, err := os.ReadFile(filepath.Join(g.dir, name)); err == nil {
		ids, err := age.ParseIdentities(bytes.NewReader(b))
		if err != nil || len(ids) != 1 {
			log.Fatalf("%s: %v", name, err)
		}
		return ids[0].(*age.X25519Identity)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		log.Fatal(err)
	}
	return id
}
