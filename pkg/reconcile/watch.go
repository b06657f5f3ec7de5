package reconcile

import (
	"errors"
	"io/fs"
	"path"
	"path/filepath"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// Watches are what a watcher follows for the current desired state. Host
// paths are real paths, resolved inside the root exactly as writes are, so
// a symlink in a managed path's parents never leads a watch out of it.
type Watches struct {
	// Dirs are the directories to watch, with the resources each concerns.
	// A directory that does not exist yet is watched through its nearest
	// ancestor that does, so its creation is seen.
	Dirs map[string][]resource.ID
	// Paths are managed paths (claims, a command's creates) and their
	// resource: an event on one concerns it alone.
	Paths map[string]resource.ID
	// Trees are the directories inside mirrored trees and their resource:
	// an event on any entry in one concerns it.
	Trees map[string]resource.ID
	// Files are files in the state dir whose change concerns a resource (a
	// supervisor's status).
	Files map[string]resource.ID
	// Tops are the host paths of the mirrored trees' tops: an event in a
	// tree names the entry relative to it.
	Tops map[resource.ID]string
}

// Watches lists what to watch for the current desired state.
func (s *Session) Watches() Watches {
	d := s.current()
	if d == nil {
		return newWatches()
	}
	return s.watches(d, d.Set.Resources())
}

// WatchesOf lists what to watch for these resources alone, as desired
// now: one that is no longer desired has nothing. A mirrored tree's
// directories are listed whole, so it costs what the tree holds; a
// revision that changed entries inside a tree needs none of it (a
// directory made in a watched tree is seen by its watch).
func (s *Session) WatchesOf(ids []resource.ID) Watches {
	d := s.current()
	if d == nil {
		return newWatches()
	}
	var rs []*resource.Resource
	for _, id := range ids {
		if r := d.Set.Get(id); r != nil {
			rs = append(rs, r)
		}
	}
	return s.watches(d, rs)
}

func newWatches() Watches {
	return Watches{Dirs: map[string][]resource.ID{}, Paths: map[string]resource.ID{}, Trees: map[string]resource.ID{}, Files: map[string]resource.ID{}, Tops: map[resource.ID]string{}}
}

func (s *Session) watches(d *Desired, rs []*resource.Resource) Watches {
	w := newWatches()
	host := s.host(d)
	for _, r := range rs {
		id := r.ID()
		var paths []string
		for _, c := range r.Spec.Claims() {
			paths = append(paths, c.Path)
			if c.Tree {
				s.watchTree(&w, c.Path, id)
			}
		}
		if x, ok := r.Spec.(resource.Watched); ok {
			paths = append(paths, x.Watched()...)
		}
		for _, p := range paths {
			if dir, real := s.resolve(p); dir != "" {
				w.Dirs[dir] = append(w.Dirs[dir], id)
				if real != "" {
					w.Paths[real] = id
				}
			}
		}
		for _, f := range host.StateFiles(r) {
			if abs, err := filepath.Abs(f); err == nil {
				w.Files[abs] = id
			}
		}
	}
	return w
}

// resolve finds the directory to watch for in-root path p: its parent as
// it really resolves, or the nearest ancestor that exists. It returns that
// directory's host path, and p's host path when its parent exists.
func (s *Session) resolve(p string) (dir, real string) {
	p = path.Clean("/" + p)
	for parent := path.Dir(p); ; parent = path.Dir(parent) {
		if d, err := s.Root.OpenDir(parent); err == nil {
			in := d.Path()
			d.Close()
			if _, ok := resource.ReservedBy(s.reserved, in); ok {
				// Resolved into what cortex-sync owns (through a link on
				// the host): its own saves would set the key off again
				// and again; what is refused there is reported anyway.
				return "", ""
			}
			dir = s.hostPath(in)
			if parent == path.Dir(p) {
				real = filepath.Join(dir, path.Base(p))
			}
			return dir, real
		}
		if parent == "/" {
			return "", ""
		}
	}
}

// hostPath is the host path of a real in-root path.
func (s *Session) hostPath(inRoot string) string {
	return filepath.Join(s.Root.Dir(), filepath.FromSlash(inRoot))
}

// watchTree adds every directory of the tree at p, as it really resolves;
// symlinks inside it are entries, never followed.
func (s *Session) watchTree(w *Watches, p string, id resource.ID) {
	top, err := s.Root.OpenDir(p)
	if err != nil {
		return // not there yet: its parent is watched
	}
	w.Tops[id] = s.hostPath(top.Path())
	var walk func(d *hostfs.Dir)
	walk = func(d *hostfs.Dir) {
		defer d.Close()
		dir := s.hostPath(d.Path())
		w.Dirs[dir] = append(w.Dirs[dir], id)
		w.Trees[dir] = id
		entries, err := d.ReadDir()
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.Type()&fs.ModeType != fs.ModeDir {
				continue
			}
			if sub, err := d.OpenDir(e.Name()); err == nil {
				walk(sub)
			}
		}
	}
	walk(top)
}

// IsTemp reports whether a file name is one of cortex-sync's own writes in
// progress: its events are no drift.
func IsTemp(name string) bool { return hostfs.IsTemp(name) }

// HostFacts are the facts of a host that a plan made elsewhere against its
// snapshot (diff --against) needs and no sandbox has.
type HostFacts struct {
	// Exists says whether each path the recorded resources watch (a
	// command's creates) exists on the host.
	Exists map[string]bool `json:"exists,omitempty"`
}

// Exists says, for every path the recorded resources watch beyond their
// claims (a command's creates), whether it exists on the host.
func (s *Session) Exists() map[string]bool {
	host := s.host(nil)
	set, _, _ := host.RecallAll(host.Env.Snapshot)
	out := map[string]bool{}
	for _, r := range set.Resources() {
		x, ok := r.Spec.(resource.Watched)
		if !ok {
			continue
		}
		for _, p := range x.Watched() {
			switch _, err := s.Root.Lstat(p); {
			case err == nil:
				out[p] = true
			case errors.Is(err, fs.ErrNotExist):
				out[p] = false
			} // else not known: a plan against the export says so
		}
	}
	return out
}
