// Package reconcile is the pipeline every command and the agent run: open
// the source, load and validate, plan, check, apply, record, and the status
// document. It is the one writer of the snapshot; commands render what it
// returns, and the agent drives it from its work queue.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// Config is where the engine works and how.
type Config struct {
	Root        string          // every host path is re-rooted under it
	Allowed     []string        // write only below these (inside Root)
	Limits      resource.Limits // bound what loading the manifests takes
	StateDir    string
	Concurrency int
	LockTimeout time.Duration
	Log         *slog.Logger
	Host        resource.Host // picks this host's paths from a Fleet manifest
	// Own are host files cortex-sync reads its own settings and trust from
	// (its config, token, keys): reserved under the root like the state
	// dir, so that no manifest can rewrite them.
	Own []Own
	// AgeKeyFile holds the age identities SOPS files (decrypt: sops, and
	// encrypted vars files) are decrypted with; read once, when first
	// needed. "": none, and an encrypted file is refused, saying so.
	AgeKeyFile string
}

// Own is a host path cortex-sync owns, and what it is for errors.
type Own struct {
	Path string `json:"path"` // a host path, as given (not under the root)
	What string `json:"what"` // "the file of --token-file"
}

// Reserved is what cortex-sync owns under the root, as in-root paths: the
// state dir and every Own that lies under the root. A path given through a
// symlink is reserved both as given and as it resolves, so that a
// manifest is refused by either name.
func (c Config) Reserved() []resource.Reserved {
	root, err := filepath.Abs(c.Root)
	if err != nil {
		return nil
	}
	realRoot := resolved(root)
	var out []resource.Reserved
	add := func(p, what string) {
		abs, err := filepath.Abs(p)
		if p == "" || err != nil {
			return
		}
		for _, base := range []string{root, realRoot} {
			for _, hp := range []string{abs, resolved(abs)} {
				rel, err := filepath.Rel(base, hp)
				if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
					continue
				}
				in := path.Clean("/" + filepath.ToSlash(rel))
				if !slices.ContainsFunc(out, func(r resource.Reserved) bool { return r.Path == in }) {
					out = append(out, resource.Reserved{Path: in, What: what})
				}
			}
		}
	}
	add(c.StateDir, "the state dir (--state-dir)")
	for _, o := range c.Own {
		add(o.Path, o.What)
	}
	if c.StateDir != "" {
		if r := ReadAgentReport(state.At(c.StateDir)); r != nil {
			for _, o := range r.Own {
				add(o.Path, o.What+" of the agent running on this state dir")
			}
		}
	}
	return out
}

// resolved is p with the symlinks of its longest existing ancestor
// resolved: a state dir not yet made is reserved where it will be.
func resolved(p string) string {
	rest := ""
	for d := p; ; d = filepath.Dir(d) {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest)
		}
		if d == filepath.Dir(d) {
			return p
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// Desired is a fetched, validated desired state: one revision of a source.
type Desired struct {
	Ref      state.Source
	Checkout *source.Checkout
	Set      *resource.Set
}

// Revision is the revision's name ("main@sha1:…"; "" for a directory).
func (d *Desired) Revision() string { return d.Checkout.Revision }

// Close releases the revision's tree.
func (d *Desired) Close() error { return d.Checkout.Close() }

// ManifestError marks an invalid desired state: nothing may be applied.
type ManifestError struct {
	Revision string // the revision refused; "" for a plain directory
	Err      error
}

func (m *ManifestError) Error() string {
	var p resource.Problems
	if errors.As(m.Err, &p) {
		n := fmt.Sprintf("%d problems", len(p))
		if len(p) == 1 {
			n = "1 problem"
		}
		return fmt.Sprintf("%s in the manifests; nothing was applied:\n  %s", n, strings.ReplaceAll(p.Error(), "\n", "\n  "))
	}
	return m.Err.Error()
}

func (m *ManifestError) Unwrap() error { return m.Err }

// Manifests are the load options of c: its allowed paths, limits and host,
// and the key of the SOPS-encrypted vars files its substitutions read.
func (c Config) Manifests() resource.Options {
	return resource.Options{AllowedPaths: c.Allowed, Reserved: c.Reserved(), Limits: c.Limits, Host: c.Host, Decrypt: c.Decrypt()}
}

// Decrypt decrypts a SOPS file with the host's age key; nil without one
// (an encrypted vars file is then refused as such).
func (c Config) Decrypt() vars.Decrypt {
	if c.AgeKeyFile == "" {
		return nil
	}
	return driver.NewDecrypter(c.AgeKeyFile).Decrypt
}

// Load fetches the source's current revision and validates it. An invalid
// revision is a *ManifestError.
func Load(ctx context.Context, src source.Source, opts resource.Options, log *slog.Logger) (*Desired, error) {
	co, err := src.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	return validate(src, co, opts, log)
}

// validate loads and validates the manifests of a fetched revision; it
// closes the checkout when they do not validate.
func validate(src source.Source, co *source.Checkout, opts resource.Options, log *slog.Logger) (*Desired, error) {
	for _, n := range co.Notes {
		log.Warn("source", "note", n)
	}
	set, err := opts.Load(co.Tree, co.Path, driver.Kinds())
	if err != nil {
		co.Close()
		return nil, &ManifestError{Revision: co.Revision, Err: err}
	}
	return &Desired{Ref: src.Ref(), Checkout: co, Set: set}, nil
}

// Session is the engine: the host, the state dir's writer, the policy and
// a desired state (nil: recalled from the snapshot), opened together. A
// command opens one for a plan, a sync or a status; the agent keeps one
// for its life and gives it each new revision (SetDesired).
type Session struct {
	Config Config
	Policy Policy
	Root   *hostfs.Root
	State  state.Dir
	Env    *driver.Env // the drivers' environment; its Snapshot and Tree follow the session's

	w         *Writer
	closed    bool
	suspended atomic.Bool
	holds     []Hold
	gates     []RevisionGate
	reserved  []resource.Reserved // what the engine owns under the root

	mu      sync.Mutex // guards desired and converged
	desired *Desired
	// converged holds what converged (applied, or found as desired) for
	// desired, the revision it is for: a dependency converged to nothing
	// (declared absent) has no record to show it.
	converged map[resource.ID]*Desired
	// applied is when this engine last applied each resource.
	applied map[resource.ID]time.Time
	// oneShot: no one converges anything while a sync runs, so a change
	// waiting for another to converge first is blocked.
	oneShot bool
}

// Open opens the root and loads the snapshot for desired (nil: none). A
// session that will write (write) takes the state lock first and keeps it
// until Close, so the snapshot it loads is the one it replaces; one that
// does not (the agent, a status) takes it for each change (Converge).
func Open(ctx context.Context, cfg Config, desired *Desired, write bool) (*Session, error) {
	s := &Session{Config: cfg, State: state.At(cfg.StateDir), desired: desired}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	var err error
	if s.w, err = newWriter(ctx, s.State, cfg.LockTimeout, write, s.log()); err != nil {
		return nil, err
	}
	if s.Root, err = hostfs.Open(cfg.Root, cfg.Allowed); err != nil {
		return nil, err
	}
	s.reserved = cfg.Reserved()
	for _, r := range s.reserved {
		s.Root.Reserve(r.Path)
	}
	s.Root.ReserveDir(cfg.StateDir)
	snap := s.w.Snapshot()
	absRoot, _ := filepath.Abs(cfg.Root)
	if snap.Root != "" && snap.Root != absRoot && len(snap.Inventory) > 0 {
		return nil, fmt.Errorf("state dir %s records resources applied under --root %s, not %s; use another --state-dir for this root", cfg.StateDir, snap.Root, absRoot)
	}
	snap.Root = absRoot
	s.Env = &driver.Env{
		Root: s.Root, State: s.State, Snapshot: snap,
		Backups:     &driver.Backups{State: s.State},
		Concurrency: cfg.Concurrency, Log: cfg.Log, Keys: driver.NewKeys(s.State),
		Decrypter: driver.NewDecrypter(cfg.AgeKeyFile),
	}
	if desired != nil {
		s.Env.Tree, s.Env.Set = desired.Checkout.Tree, desired.Set
	}
	ok = true
	return s, nil
}

// Close saves what is unsaved and releases the root and the lock; the
// desired state belongs to the caller.
func (s *Session) Close() error {
	var errs []error
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.Root != nil && !s.closed {
		errs = append(errs, s.Root.Close())
	}
	s.closed = true
	return errors.Join(errs...)
}

// Snapshot is the session's snapshot. A command that is its only user
// reads and changes it directly; concurrent users (the agent) read a View.
func (s *Session) Snapshot() *state.Snapshot { return s.w.Snapshot() }

// View is a copy of the snapshot to read while the engine changes it.
func (s *Session) View() *state.Snapshot { return s.w.View() }

// Writer is the one writer of the session's snapshot.
func (s *Session) Writer() *Writer { return s.w }

// Desired is the desired state the session converges to; nil when it is
// recalled from the snapshot.
func (s *Session) Desired() *Desired { return s.current() }

// done reports whether dep converged for desired state d.
func (s *Session) done(dep resource.ID, d *Desired) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.converged[dep] == d
}

// markDone notes whether id converged for d.
func (s *Session) markDone(id resource.ID, d *Desired, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		delete(s.converged, id)
		return
	}
	if s.applied == nil {
		s.applied = map[resource.ID]time.Time{}
	}
	if s.converged == nil {
		s.converged = map[resource.ID]*Desired{}
	}
	s.converged[id] = d
}

// appliedAt is when this engine last applied id.
func (s *Session) appliedAt(id resource.ID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.applied[id]
	return t, ok
}

func (s *Session) current() *Desired {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.desired
}

// Host is the session's driver host for its current desired state: the
// observer and the applier.
func (s *Session) Host() driver.Host { return s.host(s.current()) }

// host is the driver host for desired state d, over a view of the
// snapshot as it is now.
func (s *Session) host(d *Desired) driver.Host {
	env := *s.Env
	env.Snapshot = s.w.View()
	if d != nil {
		env.Tree, env.Set = d.Checkout.Tree, d.Set
	}
	return driver.Host{Env: &env}
}

// Suspend stops applying: observing and reporting go on; Resume undoes it.
func (s *Session) Suspend(v bool) { s.suspended.Store(v) }

// Suspended reports whether the engine is suspended.
func (s *Session) Suspended() bool { return s.suspended.Load() }

// AddHold adds a policy from outside the engine that may hold changes back
// (the agent's fight detector). Call it before the first Converge.
func (s *Session) AddHold(h Hold) { s.holds = append(s.holds, h) }
