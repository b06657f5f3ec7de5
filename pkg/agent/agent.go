package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Options configure the agent.
type Options struct {
	Engine reconcile.Config
	// Source is fetched every Interval; it stays open between polls, so a
	// Git cache is reused and a no-op poll is one ref listing.
	Source   source.Source
	Interval time.Duration // default 1m, with ±10% jitter
	// DriftInterval is the full drift scan, the safety net under the
	// watches; default 5m.
	DriftInterval     time.Duration
	SelfHeal          bool // correct drift; false: only report it
	Prune             bool
	AllowEmpty        bool
	AllowSourceChange bool
	Suspend           bool // observe and report, never change
	// FightThreshold corrections of one resource within FightWindow make
	// it fighting: reported, and its corrections back off.
	FightThreshold int
	FightWindow    time.Duration
	WaitTimeout    time.Duration
	// Retention is how long backup runs are kept, applied once a reconcile
	// converged and then at most every retentionEvery; the zero value
	// keeps them all.
	Retention state.Retention
	// RetryBase and RetryMax bound the per-key backoff of failed applies.
	RetryBase, RetryMax time.Duration
	Metrics             *Metrics // nil: on a registry of its own
	Log                 *slog.Logger
}

func (o *Options) defaults() {
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.DriftInterval <= 0 {
		o.DriftInterval = 5 * time.Minute
	}
	if o.FightThreshold <= 0 {
		o.FightThreshold = 5
	}
	if o.FightWindow <= 0 {
		o.FightWindow = 10 * time.Minute
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = time.Minute
	}
	if o.RetryBase <= 0 {
		o.RetryBase = 500 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Minute
	}
	if o.Engine.Concurrency < 1 {
		o.Engine.Concurrency = 1
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(NewRegistry())
	}
}

// Agent is the continuous reconciliation loop: it polls the source, keeps
// resource IDs on a rate-limited work queue, and heals what drifts.
type Agent struct {
	opts  Options
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[resource.ID]
	fetch chan Trigger // a fetch and full pass now
	fight *FightDetector

	mu        sync.Mutex // guards what follows
	sess      *reconcile.Session
	desired   *reconcile.Desired
	retired   []*reconcile.Desired // closed when no key is in flight
	suspended bool
	fetchErr  error     // the last fetch or validation failure
	fetchTime time.Time // the last successful fetch
	pruneHold string    // why prune is refused for this revision
	started   bool      // the first reconcile is done
	// firstPass holds the keys of the first revision not yet reconciled
	// once: the first reconcile is done when it empties (or when the
	// queue settles), however busy the queue stays with other work.
	firstPass map[resource.ID]struct{}
	episode   *Reconcile
	hints     map[resource.ID]hintOf
	watch     *watcher
	gauging   atomic.Bool // the resources gauges are being refreshed
	// inflight counts keys a worker took off the queue and has not
	// finished: the queue's length leaves them out.
	inflight atomic.Int32
	bg       sync.WaitGroup // such refreshes, waited for before closing
	rewatch  bool           // an apply made paths: the watches follow
	history  []Reconcile

	wmu     sync.Mutex // guards the state lock and what follows
	lock    *state.Lock
	holders int
	dirty   bool
	stamp   fileStamp   // state.json as last loaded or saved by the agent
	saved   time.Time   // when the agent last saved it
	linger  *time.Timer // lets go of a lock held through a burst
	pruned  time.Time   // when the backup retention last ran
}

// New makes an agent; Run starts it.
func New(opts Options) *Agent {
	opts.defaults()
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[resource.ID](opts.RetryBase, opts.RetryMax)
	cfg := workqueue.TypedRateLimitingQueueConfig[resource.ID]{Name: "resources", MetricsProvider: opts.Metrics.Workqueue}
	return &Agent{
		opts:      opts,
		log:       opts.Log,
		queue:     workqueue.NewTypedRateLimitingQueueWithConfig(limiter, cfg),
		fetch:     make(chan Trigger, 1),
		fight:     NewFightDetector(FightOptions{Threshold: opts.FightThreshold, Window: opts.FightWindow}),
		suspended: opts.Suspend,
		hints:     map[resource.ID]hintOf{},
	}
}

// Run reconciles until ctx ends: then it stops taking work, lets what is in
// flight finish, saves the snapshot and returns. Supervised processes keep
// running.
func (a *Agent) Run(ctx context.Context) error {
	sess, err := reconcile.Open(ctx, a.opts.Engine, nil, false)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.sess = sess
	a.mu.Unlock()
	a.stamp = snapshotStamp(sess.State)
	defer a.close()

	w, err := newWatcher(a)
	if err != nil {
		return err
	}
	defer w.close()
	a.mu.Lock()
	a.watch = w
	a.mu.Unlock()

	var wg sync.WaitGroup
	for range a.opts.Engine.Concurrency {
		wg.Go(func() {
			for a.work(ctx) {
			}
		})
	}
	wg.Go(func() { w.run(ctx) })
	wg.Go(func() { a.poll(ctx, w) })
	<-ctx.Done()
	a.queue.ShutDownWithDrain()
	wg.Wait()
	a.bg.Wait()
	return a.flush()
}

func (a *Agent) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.desired != nil {
		a.desired.Close()
	}
	for _, d := range a.retired {
		d.Close()
	}
	a.sess.Close()
}

// Reconcile asks for a fetch and a full pass now.
func (a *Agent) Reconcile(t Trigger) {
	select {
	case a.fetch <- t:
	default: // one is already pending
	}
}

// Suspend stops applying (observing and reporting go on); Resume undoes it.
func (a *Agent) Suspend() { a.setSuspended(true) }

// Resume applies again, and re-plans everything.
func (a *Agent) Resume() {
	a.setSuspended(false)
	a.Reconcile(TriggerManual)
}

func (a *Agent) setSuspended(v bool) {
	a.mu.Lock()
	a.suspended = v
	a.mu.Unlock()
	a.log.Info("agent", "suspended", v)
}

// Ready reports whether the first reconcile is done and the source is not
// failing, and why not.
func (a *Agent) Ready() (bool, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.fetchErr != nil:
		return false, "source failing: " + a.fetchErr.Error()
	case !a.started:
		return false, "the first reconcile is not done"
	}
	return true, ""
}

// poll fetches the source on its interval (and when asked), and scans for
// drift on the drift interval.
func (a *Agent) poll(ctx context.Context, w *watcher) {
	a.refresh(ctx, TriggerRevision, w)
	schedule := NewSchedule(a.opts.Interval)
	next := time.NewTimer(schedule.Next())
	scan := time.NewTicker(a.opts.DriftInterval)
	defer next.Stop()
	defer scan.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-a.fetch:
			a.refresh(ctx, t, w)
		case <-next.C:
			a.refresh(ctx, TriggerInterval, w)
			next.Reset(schedule.Next())
		case <-scan.C:
			a.scan(ctx, TriggerDrift)
		}
	}
}

// refresh fetches the source; a new revision is validated and adopted and
// the keys it changes are queued. A failed fetch or an invalid revision
// changes nothing: the last good revision goes on being healed.
func (a *Agent) refresh(ctx context.Context, t Trigger, w *watcher) {
	start := time.Now()
	d, err := reconcile.Load(ctx, a.opts.Source, a.opts.Engine.Manifests(), a.log)
	a.opts.Metrics.ObserveFetch(time.Since(start), err)
	if err != nil {
		a.mu.Lock()
		a.fetchErr = err
		a.mu.Unlock()
		a.log.Error("fetch failed; the last good revision stays", "error", err)
		if t != TriggerInterval {
			a.scan(ctx, t) // still heal what is there
		}
		return
	}
	a.mu.Lock()
	a.fetchErr, a.fetchTime = nil, time.Now()
	old := a.desired
	same := old != nil && d.Revision() != "" && d.Revision() == old.Revision()
	if same {
		a.mu.Unlock()
		d.Close()
		if t != TriggerInterval {
			a.scan(ctx, t)
		}
		return
	}
	a.desired = d
	if old != nil {
		a.retired = append(a.retired, old)
	}
	snap := a.sess.Snapshot
	a.pruneHold = ""
	switch {
	case snap.Source.URL != "" && snap.Source != d.Ref && !a.opts.AllowSourceChange:
		a.pruneHold = fmt.Sprintf("the source changed (%s path %q, now %s path %q); start with --allow-source-change if the host should follow it", snap.Source.URL, snap.Source.Path, d.Ref.URL, d.Ref.Path)
	case d.Set.Len() == 0 && len(snap.Inventory) > 0 && !a.opts.AllowEmpty:
		a.pruneHold = "the desired set is empty; start with --allow-empty if everything should go"
	}
	if a.pruneHold == "" {
		snap.Source = d.Ref
	}
	// Creations intended for what left Git are owed no more.
	snap.Settle(func(id string) bool { return d.Set.Get(resource.ID(id)) != nil })
	keys := a.changedKeys(old, d)
	hold := a.pruneHold
	if rb := snap.Rollback(); rb != nil && hold == "" {
		hold = rb.Error()
	}
	if !a.started && a.firstPass == nil {
		a.firstPass = make(map[resource.ID]struct{}, len(keys))
		for _, id := range keys {
			a.firstPass[id] = struct{}{}
		}
	}
	a.mu.Unlock()
	if hold != "" && a.opts.Prune {
		a.log.Warn("not pruning", "reason", hold)
	}
	a.log.Info("revision", "revision", d.Revision(), "changed", len(keys))
	trigger := t
	if old != nil && t == TriggerInterval {
		trigger = TriggerRevision
	}
	a.begin(trigger, d.Revision(), start)
	for _, id := range keys {
		a.queue.Add(id)
	}
	w.sync(d.Set)
	if t != TriggerInterval && old != nil {
		a.scan(ctx, t)
	}
	a.settle()
}

// changedKeys are the resources whose desired state differs between two
// revisions, and those in the inventory that left Git. Called with mu held.
func (a *Agent) changedKeys(old, d *reconcile.Desired) []resource.ID {
	var keys []resource.ID
	digest := func(des *reconcile.Desired, r *resource.Resource) string {
		env := *a.sess.Env
		env.Tree, env.Set = des.Checkout.Tree, des.Set
		s, err := driver.Host{Env: &env}.Digest(r)
		if err != nil {
			return "error: " + err.Error()
		}
		return s
	}
	for _, r := range d.Set.Resources() {
		if old == nil {
			keys = append(keys, r.ID())
			continue
		}
		if prev := old.Set.Get(r.ID()); prev == nil || digest(old, prev) != digest(d, r) {
			keys = append(keys, r.ID())
		}
	}
	for _, rec := range a.sess.Snapshot.Inventory {
		id := resource.ID(rec.ID)
		if d.Set.Get(id) == nil || old == nil {
			keys = append(keys, id)
		}
	}
	return keys
}

// scan observes everything and queues what is not converged: the full
// drift check, the safety net under the watches.
func (a *Agent) scan(ctx context.Context, t Trigger) {
	a.mu.Lock()
	d := a.desired
	if d == nil {
		a.mu.Unlock()
		return
	}
	env := a.env(d)
	snap := a.sess.Snapshot.WithInventory(append([]*state.Entry(nil), a.sess.Snapshot.Inventory...))
	a.mu.Unlock()
	plan := diff.Make(ctx, driver.Host{Env: env}, d.Set, snap, a.opts.Engine.Concurrency)
	n := 0
	for _, c := range plan.Changes {
		if c.Pending() || c.Err != nil {
			a.queue.Add(c.ID)
			n++
		}
	}
	if n > 0 {
		a.begin(t, d.Revision(), time.Now())
		a.log.Info("scan", "trigger", t, "pending", n)
	}
	a.settle()
}

// env is the engine's environment for one revision. Called with mu held.
func (a *Agent) env(d *reconcile.Desired) *driver.Env {
	env := *a.sess.Env
	env.Snapshot = a.sess.Snapshot
	env.Tree, env.Set = d.Checkout.Tree, d.Set
	return &env
}
