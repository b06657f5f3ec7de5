// Package driver holds what each kind means on the host: its spec, how it is
// observed, compared, applied, deleted and judged healthy. One file per
// kind; the engines reach them through Host and never switch on kind.
package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Driver is one kind's knowledge of the host.
type Driver interface {
	// Plan compares desired (nil when it left Git) and the record (nil when
	// never applied) with the live host.
	Plan(ctx context.Context, env *Env, desired *resource.Resource, rec *state.Entry) (*diff.Change, error)
	// Apply carries out a planned change and returns the new record (nil
	// when the resource is gone).
	Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error)
	// Observe compares the live host with the record alone, for status
	// without a source.
	Observe(ctx context.Context, env *Env, rec *state.Entry) health.Report
}

var drivers = map[string]Driver{
	"File":      fileDriver{},
	"Directory": directoryDriver{},
	"Symlink":   symlinkDriver{},
	"Process":   processDriver{},
	"Command":   commandDriver{},
}

// Kinds lists the kinds and their spec constructors, for the manifest loader.
func Kinds() resource.Kinds {
	return resource.Kinds{
		"File":      func() resource.Spec { return &FileSpec{} },
		"Directory": func() resource.Spec { return &DirectorySpec{} },
		"Symlink":   func() resource.Spec { return &SymlinkSpec{} },
		"Process":   func() resource.Spec { return &ProcessSpec{} },
		"Command":   func() resource.Spec { return &CommandSpec{} },
	}
}

// digester is a driver that can name a resource's whole desired state, for
// what restarts or refreshes on it; others are named by their spec alone.
type digester interface {
	digest(env *Env, r *resource.Resource) (string, error)
}

// desiredDigest names everything a resource's desired state holds.
func desiredDigest(env *Env, r *resource.Resource) (string, error) {
	if d, ok := drivers[r.Kind].(digester); ok {
		return d.digest(env, r)
	}
	return specHash(r), nil
}

// Env is everything drivers need from outside.
type Env struct {
	Root     *hostfs.Root
	Tree     source.Tree   // the desired revision; nil when there is no source
	Set      *resource.Set // the desired set; nil when there is no source
	State    state.Dir
	Snapshot *state.Snapshot
	Backups  *Backups
	// Verify hashes every file instead of trusting unchanged stats.
	Verify bool
	// Simulate is for a sandbox that stands for a host (diff --against):
	// processes and commands are recorded as applied and observed as
	// running, and nothing is started or run.
	Simulate    bool
	Concurrency int
	Log         *slog.Logger
}

// Host dispatches to the driver of each resource's kind. It is the
// diff.Observer and the apply.Applier.
type Host struct{ Env *Env }

func (h Host) driver(kind string) (Driver, error) {
	d, ok := drivers[kind]
	if !ok {
		return nil, fmt.Errorf("kind %q is not known to this version of cortex-sync", kind)
	}
	return d, nil
}

// Plan implements diff.Observer.
func (h Host) Plan(ctx context.Context, desired *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	kind := ""
	if desired != nil {
		kind = desired.Kind
	} else {
		kind = rec.Kind
	}
	d, err := h.driver(kind)
	if err != nil {
		return nil, err
	}
	return d.Plan(ctx, h.Env, desired, rec)
}

// Apply implements apply.Applier.
func (h Host) Apply(ctx context.Context, c *diff.Change) (*state.Entry, error) {
	d, err := h.driver(c.Kind)
	if err != nil {
		return nil, err
	}
	return d.Apply(ctx, h.Env, c)
}

// Observe reports one recorded resource's live status.
func (h Host) Observe(ctx context.Context, rec *state.Entry) health.Report {
	d, err := h.driver(rec.Kind)
	if err != nil {
		return health.Report{Sync: health.OutOfSync, Health: health.Unknown, Reason: err.Error()}
	}
	return d.Observe(ctx, h.Env, rec)
}

// becomesReady is a driver whose resources turn healthy some time after
// they are applied (a process passing its readiness probe).
type becomesReady interface {
	Observe(ctx context.Context, env *Env, rec *state.Entry) health.Report
	becomesReady()
}

func (processDriver) becomesReady() {}

// Ready reports the live health of a resource that turns healthy after its
// apply; ok is false for kinds that are done once applied.
func (h Host) Ready(ctx context.Context, rec *state.Entry) (health.Report, bool) {
	d, ok := drivers[rec.Kind].(becomesReady)
	if !ok {
		return health.Report{}, false
	}
	return d.Observe(ctx, h.Env, rec), true
}

// specHash names a spec's desired state, so a change in Git is seen.
func specHash(r *resource.Resource) string {
	b, _ := json.Marshal(r.Spec)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// newEntry starts the record of an applied resource.
func newEntry(r *resource.Resource, p string) *state.Entry {
	return &state.Entry{ID: string(r.ID()), Kind: r.Kind, Path: p, SpecHash: specHash(r), NoPrune: r.PruneDisabled()}
}

// Backups keeps what cortex-sync overwrites or deletes that it had not
// written itself, under stateDir/backups/<time>/<in-root path>.
type Backups struct {
	Dir  string // stateDir/backups
	once sync.Once
	run  string
	err  error
}

// Save copies the entry name of d to the backups before it is replaced. It
// returns where the copy went. Directories are copied whole.
func (b *Backups) Save(d *hostfs.Dir, name string) (string, error) {
	b.once.Do(func() {
		b.run = filepath.Join(b.Dir, time.Now().UTC().Format("20060102T150405.000000000Z"))
		b.err = os.MkdirAll(b.run, 0o700)
	})
	if b.err != nil {
		return "", fmt.Errorf("backups: %w", b.err)
	}
	dst := filepath.Join(b.run, filepath.FromSlash(path.Join(d.Path(), name)))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", err
	}
	if err := copyOut(d, name, dst); err != nil {
		return "", fmt.Errorf("back up %s: %w", path.Join(d.Path(), name), err)
	}
	return dst, nil
}

// copyOut copies an entry of the confined host to a plain path, durably.
func copyOut(d *hostfs.Dir, name, dst string) error {
	st, err := d.Lstat(name)
	if err != nil {
		return err
	}
	switch {
	case st.Mode&fs.ModeSymlink != 0:
		target, err := d.Readlink(name)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case st.Mode.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		sub, err := d.OpenDir(name)
		if err != nil {
			return err
		}
		defer sub.Close()
		entries, err := sub.ReadDir()
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyOut(sub, e.Name(), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case !st.Mode.IsRegular():
		return nil // sockets, fifos, devices: nothing to keep
	}
	src, err := d.Open(name)
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, src); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// owner resolves an owner or group (a name or a numeric id); "" is -1, left
// alone. Ownership is managed only when cortex-sync runs as root.
func owner(name string, group bool) (int, error) {
	if name == "" || os.Geteuid() != 0 {
		return -1, nil
	}
	if id, err := strconv.Atoi(name); err == nil {
		return id, nil
	}
	if group {
		g, err := user.LookupGroup(name)
		if err != nil {
			return 0, fmt.Errorf("group %q: %w", name, err)
		}
		return strconv.Atoi(g.Gid)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("owner %q: %w", name, err)
	}
	return strconv.Atoi(u.Uid)
}

// attrs are the mode and owners a resource wants; a zero Mode is unmanaged.
type attrs struct {
	mode     fs.FileMode
	uid, gid int
}

func wantAttrs(mode *resource.Mode, ownerName, groupName string) (attrs, error) {
	a := attrs{uid: -1, gid: -1}
	if mode != nil {
		a.mode = mode.FileMode()
	}
	var err error
	if a.uid, err = owner(ownerName, false); err != nil {
		return a, err
	}
	if a.gid, err = owner(groupName, true); err != nil {
		return a, err
	}
	return a, nil
}

// diffs lists the attributes in which live differs from what is wanted.
func (a attrs) diffs(live hostfs.Stat) []diff.Attr {
	var out []diff.Attr
	perm := live.Mode & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if a.mode != 0 && perm != a.mode {
		out = append(out, diff.Attr{Field: "mode", Before: resource.Mode(perm).String(), After: resource.Mode(a.mode).String()})
	}
	if a.uid >= 0 && int(live.UID) != a.uid {
		out = append(out, diff.Attr{Field: "owner", Before: strconv.Itoa(int(live.UID)), After: strconv.Itoa(a.uid)})
	}
	if a.gid >= 0 && int(live.GID) != a.gid {
		out = append(out, diff.Attr{Field: "group", Before: strconv.Itoa(int(live.GID)), After: strconv.Itoa(a.gid)})
	}
	return out
}

// host turns wanted attributes into what hostfs sets, with a default mode.
func (a attrs) host(def fs.FileMode) hostfs.Attrs {
	m := a.mode
	if m == 0 {
		m = def
	}
	return hostfs.Attrs{Mode: m, UID: a.uid, GID: a.gid}
}

// hashFile is the SHA-256 of an entry's content, as the fingerprint keeps it.
func hashFile(d *hostfs.Dir, name string) (string, error) {
	f, err := d.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// unchanged reports whether the live file still holds what the fingerprint
// recorded: the quick stat check first, a hash only when the stat moved, the
// timestamps are racily close to the record, or verify asks for it.
func unchanged(live hostfs.Stat, fp *state.IndexEntry, racy, verify bool, hash func() (string, error)) (bool, error) {
	if fp == nil || !live.Mode.IsRegular() {
		return false, nil
	}
	if live.Same(fp.Stat) && !racy && !verify {
		return true, nil
	}
	if live.Size != fp.Size {
		return false, nil
	}
	sum, err := hash()
	return sum == fp.SHA256, err
}

// missing reports a path error that means "not there": the path or one of
// its parents does not exist, or a parent is not a directory.
func missing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
}

// parallel runs fn(0..n-1) on at most workers goroutines; the first error wins.
func parallel(workers, n int, fn func(i int) error) error {
	workers = max(1, min(workers, n))
	var next sync.Mutex
	i := 0
	var errs []error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				next.Lock()
				if i >= n || len(errs) > 0 {
					next.Unlock()
					return
				}
				j := i
				i++
				next.Unlock()
				if err := fn(j); err != nil {
					next.Lock()
					errs = append(errs, err)
					next.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
