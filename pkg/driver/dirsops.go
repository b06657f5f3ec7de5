package driver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/sops"
	"github.com/cortex-sync/cortex-sync/pkg/source"
)

// A Directory with decrypt: sops mirrors its source as any Directory does,
// except its SOPS-encrypted entries: each becomes a File of its own
// (decrypt: sops, mode 0600, the Directory's owner and group), declared
// when the manifests load and named File/<directory>/<entry>. The mirror
// never sees those entries (a hidingTree leaves them out), so its tree
// index, which names every file it writes by an unkeyed digest, holds
// nothing of a secret; the File keeps keyed IDs, as every decrypted File
// does.

// MaxEncryptedEntries bounds the Files a Directory with decrypt: sops
// declares, one per encrypted entry.
const MaxEncryptedEntries = 1000

// encryptedEntry is an encrypted entry of a Directory's source.
type encryptedEntry struct {
	rel  string // below the Directory's source, as below its path
	repo string // the repository path
}

// findEncrypted lists the SOPS-encrypted files of the Directory's source:
// regular files of at most sops.MaxSize bytes that sops.IsEncrypted takes
// for one (a larger file is not SOPS's and is mirrored as it is). What a
// content ID named before is not read again.
func (s *DirectorySpec) findEncrypted(v *resource.Validation) {
	ids, _ := v.Source.(interface{ ContentID(string) (string, error) })
	var found []encryptedEntry
	err := fs.WalkDir(v.Source, s.sourcePath, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return fs.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		enc, err := isEncryptedFile(v.Source, ids, name)
		if err != nil || !enc {
			return err
		}
		rel := strings.TrimPrefix(name, s.sourcePath+"/")
		if s.sourcePath == "." {
			rel = name
		}
		if !printable(rel) {
			return fmt.Errorf("%s: an encrypted entry becomes a File named for its path, which must be printable UTF-8; rename it", strings.ToValidUTF8(name, "\uFFFD"))
		}
		if len(found) == MaxEncryptedEntries {
			return fmt.Errorf("more than %d encrypted files; a Directory with decrypt: sops may hold at most %d (one File each)", MaxEncryptedEntries, MaxEncryptedEntries)
		}
		found = append(found, encryptedEntry{rel: rel, repo: name})
		return nil
	})
	if err != nil {
		v.Errorf("spec.source", "%s: %v", s.Source, unwrapPathErr(err))
		return
	}
	s.encrypted = found
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' })
}

// encryptedSeen remembers, by content ID and format, whether a file is a
// SOPS file: an agent loading the manifests again reads none it read.
var encryptedSeen struct {
	sync.Mutex
	m map[string]bool
}

func isEncryptedFile(tree fs.FS, ids interface{ ContentID(string) (string, error) }, name string) (bool, error) {
	fi, err := fs.Stat(tree, name)
	if err != nil {
		return false, err
	}
	if fi.Size() == 0 || fi.Size() > sops.MaxSize {
		return false, nil
	}
	key := ""
	if ids != nil {
		if id, err := ids.ContentID(name); err == nil {
			key = id + " " + sops.FormatOf(name).String()
			encryptedSeen.Lock()
			enc, ok := encryptedSeen.m[key]
			encryptedSeen.Unlock()
			if ok {
				return enc, nil
			}
		}
	}
	b, err := readSOPS(func() (io.ReadCloser, error) { return tree.Open(name) })
	if errors.Is(err, sops.ErrTooLarge) {
		return false, nil // grew since its stat: not a SOPS file
	}
	if err != nil {
		return false, err
	}
	enc := sops.IsEncrypted(name, b)
	if key != "" {
		encryptedSeen.Lock()
		if encryptedSeen.m == nil || len(encryptedSeen.m) >= maxDecryptedIDs {
			encryptedSeen.m = map[string]bool{}
		}
		encryptedSeen.m[key] = enc
		encryptedSeen.Unlock()
	}
	return enc, nil
}

// Generated declares a File for each encrypted entry.
func (s *DirectorySpec) Generated() []resource.Generated {
	out := make([]resource.Generated, 0, len(s.encrypted))
	for _, e := range s.encrypted {
		out = append(out, resource.Generated{Kind: "File", Name: e.rel, Spec: &FileSpec{
			Path:       path.Join(s.Path, e.rel),
			Source:     path.Join(s.Source, e.rel),
			Decrypt:    DecryptSOPS,
			Owner:      s.Owner,
			Group:      s.Group,
			sourcePath: e.repo,
		}})
	}
	return out
}

// hidden is the set of repository paths the mirror leaves out.
func (s *DirectorySpec) hidden() map[string]bool {
	if len(s.encrypted) == 0 {
		return nil
	}
	m := make(map[string]bool, len(s.encrypted))
	for _, e := range s.encrypted {
		m[e.repo] = true
	}
	return m
}

// sourceEnv is env with the Directory's source as its mirror sees it:
// rendered (substitute: true), or without its encrypted entries.
func (s *DirectorySpec) sourceEnv(env *Env) *Env {
	env = s.renderedEnv(env)
	if s == nil || len(s.encrypted) == 0 || env.recalled() {
		return env
	}
	cp := *env
	cp.Tree = &hidingTree{Tree: env.Tree, hidden: s.hidden()}
	return &cp
}

// hidingTree is a tree without the files named in hidden: they do not
// exist for whoever reads it. Like renderedTree it has none of the
// shortcuts of the tree it wraps (tree IDs, stats later), which would
// count the hidden files.
type hidingTree struct {
	source.Tree
	hidden map[string]bool // repository paths
}

func (t *hidingTree) gone(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

func (t *hidingTree) Open(name string) (fs.File, error) {
	if t.hidden[path.Clean(name)] {
		return nil, t.gone("open", name)
	}
	return t.Tree.Open(name)
}

// Lstat is the tree's, but for a hidden file.
func (t *hidingTree) Lstat(name string) (fs.FileInfo, error) {
	if t.hidden[path.Clean(name)] {
		return nil, t.gone("lstat", name)
	}
	return fs.Lstat(t.Tree, name)
}

// ReadLink is the tree's: a scoped walk reads links through it.
func (t *hidingTree) ReadLink(name string) (string, error) { return fs.ReadLink(t.Tree, name) }

func (t *hidingTree) ContentID(name string) (string, error) {
	if t.hidden[path.Clean(name)] {
		return "", t.gone("read", name)
	}
	return t.Tree.ContentID(name)
}

func (t *hidingTree) Walk(dir string, fn func(source.Entry) error) error {
	return t.Tree.Walk(dir, func(e source.Entry) error {
		if e.Mode.IsRegular() && t.hidden[path.Join(dir, e.Path)] {
			e.Release()
			return nil
		}
		return fn(e)
	})
}

// decryptedDigest adds to a Directory's digest its encrypted entries,
// each by the keyed ID of its plaintext: what restarts on the Directory
// restarts when a secret in it changes, and not on a key rotation.
func (s *DirectorySpec) decryptedDigest(env *Env, w io.Writer) error {
	es := slices.Clone(s.encrypted)
	slices.SortFunc(es, func(a, b encryptedEntry) int { return strings.Compare(a.rel, b.rel) })
	for _, e := range es {
		id, err := env.decryptedID(e.repo, path.Join(s.Source, e.rel))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n%s decrypted %s", e.rel, id)
	}
	return nil
}

// yieldedPaths are the host paths of the Files r declared that left Git
// while r stays (decrypt: sops turned off, an entry no longer
// encrypted): this pass deletes each, as its File's record allows, and
// the mirror writes what its source now has there in the next pass,
// never over a decrypted file (which it would back up, plaintext and
// all, as a file it did not write).
func yieldedPaths(env *Env, r *resource.Resource) map[string]bool {
	if r == nil || env.Snapshot == nil || env.Set == nil {
		return nil
	}
	var m map[string]bool
	for _, e := range env.Snapshot.Inventory {
		if e.GeneratedBy == string(r.ID()) && env.Set.Get(resource.ID(e.ID)) == nil {
			if m == nil {
				m = map[string]bool{}
			}
			m[e.Path] = true
		}
	}
	return m
}
