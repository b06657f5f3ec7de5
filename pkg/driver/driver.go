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
	"log/slog"
	"sync/atomic"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"golang.org/x/sync/errgroup"
)

// Driver is one kind's knowledge of the host. Drivers observe; the engine
// decides: Observe reports facts (diff.Observation) and what to show, and
// diff.Decide turns them into the action and its reason.
type Driver interface {
	// Observe compares desired (nil when it left Git) and the record (nil
	// when never applied) with the live host. It fills the change's
	// Observed facts, its display fields, Health and Work; never Action or
	// Reason.
	Observe(ctx context.Context, env *Env, desired *resource.Resource, rec *state.Entry) (*diff.Change, error)
	// Apply carries out a decided change and returns the new record (nil
	// when the resource is gone).
	Apply(ctx context.Context, env *Env, c *diff.Change) (*state.Entry, error)
}

// kind is one registered kind: its spec and its driver.
type kind struct {
	newSpec func() resource.Spec
	driver  Driver
}

var kinds = map[string]kind{}

// Register adds a kind. Each driver file registers its own from init, so
// adding a kind is adding one file.
func Register(name string, newSpec func() resource.Spec, d Driver) {
	kinds[name] = kind{newSpec: newSpec, driver: d}
}

// Kinds lists the kinds and their spec constructors, for the manifest loader.
func Kinds() resource.Kinds {
	out := resource.Kinds{}
	for name, k := range kinds {
		out[name] = k.newSpec
	}
	return out
}

// digester is a driver that can name a resource's whole desired state, for
// what restarts or refreshes on it; others are named by their spec alone.
type digester interface {
	digest(env *Env, r *resource.Resource) (string, error)
}

// desiredDigest names everything a resource's desired state holds.
func desiredDigest(env *Env, r *resource.Resource) (string, error) {
	if d, ok := kinds[r.Kind].driver.(digester); ok {
		return d.digest(env, r)
	}
	return specHash(r), nil
}

// Env is everything drivers need from outside.
type Env struct {
	Root *hostfs.Root
	// Tree is the desired revision. It is nil when the desired state is
	// recalled from the snapshot (status without a source): then content
	// is what the record says cortex-sync last wrote.
	Tree     source.Tree
	Set      *resource.Set // the desired set
	State    state.Dir
	Snapshot *state.Snapshot
	Backups  *Backups
	// Verify hashes every file instead of trusting unchanged stats.
	Verify bool
	// Simulate is for a sandbox that stands for a host (diff --against):
	// processes and commands are recorded as applied and observed as
	// running, and nothing is started or run.
	Simulate bool
	// Scope, when not nil, narrows an observation to these entries of a
	// tree (slash paths below its top, each with all below it): what a
	// watch event named. Kinds without a tree ignore it.
	Scope []string
	// Exists holds, for a simulation, whether paths the host's resources
	// watch exist on that host (a command's creates), as its state export
	// recorded them; a path not in it is not known.
	Exists map[string]bool
	// CountFiles is for a plan made only to be applied (sync): a tree with
	// more changes than a plan holds counts them by action and reason
	// rather than listing each.
	CountFiles  bool
	Concurrency int
	Log         *slog.Logger
	// Keys keys the IDs of sensitive content and secret files with the
	// state dir's host key.
	Keys *Keys
	// Decrypter decrypts the SOPS files specs name (decrypt: sops) with
	// the host's age keys.
	Decrypter *Decrypter
	// legacyIDs names content as an older cortex-sync did, where it had
	// another form (legacyHash).
	legacyIDs bool
}

// recalled reports whether the desired state comes from the snapshot.
func (env *Env) recalled() bool { return env.Tree == nil }

// Host dispatches to the driver of each resource's kind. It is the
// diff.Observer and the apply.Applier.
type Host struct{ Env *Env }

func (h Host) driver(name string) (Driver, error) {
	k, ok := kinds[name]
	if !ok {
		return nil, fmt.Errorf("kind %q is not known to this version of cortex-sync", name)
	}
	return k.driver, nil
}

// Observe implements diff.Observer.
func (h Host) Observe(ctx context.Context, desired *resource.Resource, rec *state.Entry) (*diff.Change, error) {
	name := ""
	if desired != nil {
		name = desired.Kind
	} else {
		name = rec.Kind
	}
	d, err := h.driver(name)
	if err != nil {
		return nil, err
	}
	c, err := d.Observe(ctx, h.Env, desired, rec)
	if c != nil {
		markVarsChanged(c, varsChanged(h.Env, desired, rec))
		if desired == nil && rec.GeneratedBy != "" && h.Env.Set != nil && h.Env.Set.Get(resource.ID(rec.GeneratedBy)) != nil {
			// What declared it is still declared: it left Git as a file
			// leaves a mirror's source.
			c.Observed.Declared = true
		}
	}
	return c, err
}

// verber is a driver whose creates and updates are carried out otherwise
// (a process is started, a command run).
type verber interface{ verbs() diff.Verbs }

// Verbs implements diff.Observer.
func (h Host) Verbs(name string) diff.Verbs {
	if v, ok := kinds[name].driver.(verber); ok {
		return v.verbs()
	}
	return diff.DefaultVerbs
}

// Apply implements apply.Applier. Every record it returns carries the spec
// it was applied with, so the desired state can be recalled without a
// source (status) and judged the same way.
func (h Host) Apply(ctx context.Context, c *diff.Change) (*state.Entry, error) {
	d, err := h.driver(c.Kind)
	if err != nil {
		return nil, err
	}
	e, err := d.Apply(ctx, h.Env, c)
	if e != nil && c.Desired != nil {
		e.Spec, _ = json.Marshal(c.Desired.Spec)
		e.SpecHash = specHash(c.Desired)
		e.Annotations = c.Desired.Metadata.Annotations
		e.NoPrune = c.Desired.PruneDisabled()
		rendered, rerr := renderedRecord(h.Env, c.Desired)
		if rerr != nil {
			return nil, errors.Join(err, rerr)
		}
		e.Vars = rendered
	}
	return e, err
}

// Recall rebuilds the resource a record was applied from, so the host can
// be judged against it without a source.
func (h Host) Recall(rec *state.Entry) (*resource.Resource, error) {
	k, ok := kinds[rec.Kind]
	if !ok {
		return nil, fmt.Errorf("kind %q is not known to this version of cortex-sync", rec.Kind)
	}
	if len(rec.Spec) == 0 {
		return nil, fmt.Errorf("recorded by an older cortex-sync without its spec; sync once to record it")
	}
	spec := k.newSpec()
	if err := json.Unmarshal(rec.Spec, spec); err != nil {
		return nil, fmt.Errorf("recorded spec: %w", err)
	}
	if r, ok := spec.(recallable); ok {
		r.recall()
	}
	id := resource.ID(rec.ID)
	r := &resource.Resource{
		APIVersion: resource.APIVersion, Kind: rec.Kind,
		Metadata: resource.Metadata{Name: id.Name(), Annotations: rec.Annotations},
		Spec:     spec,
	}
	r.SetGeneratedBy(resource.ID(rec.GeneratedBy))
	return r, nil
}

// RecallAll rebuilds the desired state as last applied from a snapshot:
// the set, the snapshot narrowed to what could be recalled, and a change
// carrying the error for each entry that could not.
func (h Host) RecallAll(snap *state.Snapshot) (*resource.Set, *state.Snapshot, []*diff.Change) {
	var list []*resource.Resource
	var unknown []*diff.Change
	var inv []*state.Entry
	for _, rec := range snap.Inventory {
		r, err := h.Recall(rec)
		if err != nil {
			unknown = append(unknown, &diff.Change{ID: resource.ID(rec.ID), Kind: rec.Kind, Path: rec.Path, Action: diff.NoOp, Health: health.Unknown, Err: err, Record: rec})
			continue
		}
		list = append(list, r)
		inv = append(inv, rec)
	}
	return resource.Recalled(list), snap.WithInventory(inv), unknown
}

// Digest names everything a resource's desired state holds (its spec and
// content): what changed between two revisions.
func (h Host) Digest(r *resource.Resource) (string, error) { return desiredDigest(h.Env, r) }

// stateWatcher is a driver whose resources report through files in the
// state dir (a supervisor's status).
type stateWatcher interface {
	stateFiles(env *Env, r *resource.Resource) []string
}

// StateFiles lists the files in the state dir whose change concerns r.
func (h Host) StateFiles(r *resource.Resource) []string {
	if w, ok := kinds[r.Kind].driver.(stateWatcher); ok {
		return w.stateFiles(h.Env, r)
	}
	return nil
}

// changer is a driver that can tell cheaply which parts of a resource
// changed between two revisions (a mirrored tree, from its Git tree IDs).
type changer interface {
	changes(env *Env, old source.Tree, prev, r *resource.Resource, limit int) ([]string, bool)
}

// Changes tells which entries of r's tree changed since prev, its desired
// state in the revision of tree old, when the kind can tell cheaply: ok
// with no paths means nothing did. ok is false when it cannot say (then
// compare digests) or more than limit did.
func (h Host) Changes(old source.Tree, prev, r *resource.Resource, limit int) ([]string, bool) {
	if c, ok := kinds[r.Kind].driver.(changer); ok && prev != nil && prev.Kind == r.Kind {
		return c.changes(h.Env, old, prev, r, limit)
	}
	return nil, false
}

// recallable is a spec with fields derived at validation that a recalled
// spec must derive again.
type recallable interface{ recall() }

// ready is a driver whose resources turn healthy some time after they are
// applied (a process passing its readiness probe).
type ready interface {
	health(ctx context.Context, env *Env, rec *state.Entry) health.Report
}

// Ready reports the live health of a resource that turns healthy after its
// apply; ok is false for kinds that are done once applied.
func (h Host) Ready(ctx context.Context, rec *state.Entry) (health.Report, bool) {
	d, ok := kinds[rec.Kind].driver.(ready)
	if !ok {
		return health.Report{}, false
	}
	return d.health(ctx, h.Env, rec), true
}

// specHash names a spec's desired state, so a change in Git is seen.
func specHash(r *resource.Resource) string {
	b, _ := json.Marshal(r.Spec)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// newEntry starts the record of an applied resource.
func newEntry(r *resource.Resource, p string) *state.Entry {
	return &state.Entry{ID: string(r.ID()), Kind: r.Kind, Path: p, SpecHash: specHash(r), NoPrune: r.PruneDisabled(), GeneratedBy: string(r.GeneratedBy())}
}

// parallel runs fn(0..n-1) on at most workers goroutines; after the first
// error no more are started, and the errors are returned.
func parallel(workers, n int, fn func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(max(1, workers))
	var failed atomic.Bool
	for i := range n {
		if failed.Load() {
			break
		}
		g.Go(func() error {
			err := fn(i)
			if err != nil {
				failed.Store(true)
			}
			return err
		})
	}
	return g.Wait()
}
