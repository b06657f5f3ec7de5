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
	"path/filepath"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
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
type ManifestError struct{ Err error }

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

// Manifests are the load options of c: its allowed paths and limits.
func (c Config) Manifests() resource.Options {
	return resource.Options{AllowedPaths: c.Allowed, Limits: c.Limits}
}

// Load fetches the source's current revision and validates it. An invalid
// revision is a *ManifestError.
func Load(ctx context.Context, src source.Source, opts resource.Options, log *slog.Logger) (*Desired, error) {
	co, err := src.Fetch(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range co.Notes {
		log.Warn("source", "note", n)
	}
	set, err := opts.Load(co.Tree, co.Path, driver.Kinds())
	if err != nil {
		co.Close()
		return nil, &ManifestError{err}
	}
	return &Desired{Ref: src.Ref(), Checkout: co, Set: set}, nil
}

// Session is the host, the snapshot and a desired state (nil: recalled from
// the snapshot) opened together: what a plan, a sync or a status needs.
type Session struct {
	Config   Config
	Root     *hostfs.Root
	State    state.Dir
	Snapshot *state.Snapshot
	Desired  *Desired // nil without a source
	Env      *driver.Env

	lock *state.Lock
}

// Open opens the root and loads the snapshot for desired (nil: none). A
// session that will write (write) first takes the state lock, so the
// snapshot it loads is the one it replaces; Close releases it.
func Open(ctx context.Context, cfg Config, desired *Desired, write bool) (*Session, error) {
	s := &Session{Config: cfg, State: state.At(cfg.StateDir), Desired: desired}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	var err error
	if write {
		if s.lock, err = s.State.Lock(ctx, cfg.LockTimeout); err != nil {
			return nil, err
		}
	}
	if s.Root, err = hostfs.Open(cfg.Root, cfg.Allowed); err != nil {
		return nil, err
	}
	if s.Snapshot, err = s.State.Load(); err != nil {
		return nil, err
	}
	absRoot, _ := filepath.Abs(cfg.Root)
	if s.Snapshot.Root != "" && s.Snapshot.Root != absRoot && len(s.Snapshot.Inventory) > 0 {
		return nil, fmt.Errorf("state dir %s records resources applied under --root %s, not %s; use another --state-dir for this root", cfg.StateDir, s.Snapshot.Root, absRoot)
	}
	s.Snapshot.Root = absRoot
	s.Env = &driver.Env{
		Root: s.Root, State: s.State, Snapshot: s.Snapshot,
		Backups:     &driver.Backups{State: s.State},
		Concurrency: cfg.Concurrency, Log: cfg.Log, Keys: driver.NewKeys(s.State),
	}
	if desired != nil {
		s.Env.Tree, s.Env.Set = desired.Checkout.Tree, desired.Set
	}
	ok = true
	return s, nil
}

// Close releases the root and the lock; the desired state belongs to the
// caller.
func (s *Session) Close() error {
	var errs []error
	if s.Root != nil {
		errs = append(errs, s.Root.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Unlock())
	}
	return errors.Join(errs...)
}

// Host is the session's driver host: the observer and the applier.
func (s *Session) Host() driver.Host { return driver.Host{Env: s.Env} }
