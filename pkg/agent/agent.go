package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/cortex-sync/cortex-sync/pkg/diff"
	"github.com/cortex-sync/cortex-sync/pkg/events"
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
	Source source.Source
	// Lock is the state dir's agent lock (state.Dir.LockAgent), taken by
	// the caller: the agent takes it again should the state dir be
	// removed under it. Nil: none is checked.
	Lock     *state.Lock
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
	// FightSettle is how long a fighting resource must be left alone
	// before it is corrected again; default 2s.
	FightSettle time.Duration
	// WaitTimeout bounds how long a dependent waits for a dependency to
	// turn healthy after that dependency's apply; then it is blocked.
	WaitTimeout time.Duration
	// Retention is how long backup runs are kept, applied once a reconcile
	// converged and then at most every retentionEvery; the zero value
	// keeps them all.
	Retention state.Retention
	// Revisions is the health gate on a new revision: minReady (zero:
	// healthy once is enough; run's flag defaults to 10s), the progress
	// deadline, host checks, and what becomes of a bad one (rollback.go).
	Revisions reconcile.RevisionPolicy
	// RevisionGates are asked before a new revision is applied (a fleet's
	// rollout slot), and hear its verdict; never about the revision the
	// host is on, which the agent goes on healing meanwhile.
	RevisionGates []reconcile.RevisionGate
	// WindowClock is the clock deploy windows are read on; nil: the real
	// one (tests set another, and the poll then looks again).
	WindowClock func() time.Time
	// Fleet, when set, is the fleet the host is in (fleet.go): its rollout
	// gates new revisions, it hears the host's state, and it runs the
	// singletons.
	Fleet Coordinator
	// RetryBase and RetryMax bound the per-key backoff of failed applies.
	RetryBase, RetryMax time.Duration
	Metrics             *Metrics // nil: on a registry of its own
	Log                 *slog.Logger
	Events              events.Sink // nil: none
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
	if o.FightSettle <= 0 {
		o.FightSettle = DefaultFightSettle
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
	if o.Engine.Log == nil {
		o.Engine.Log = o.Log // the engine's words are the agent's
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(NewRegistry())
	}
	if o.Events == nil {
		o.Events = events.Discard
	}
}

// policy is what the options let the engine do.
func (o *Options) policy() reconcile.Policy {
	return reconcile.Policy{Prune: o.Prune, AllowEmpty: o.AllowEmpty, AllowSourceChange: o.AllowSourceChange,
		NoSelfHeal: !o.SelfHeal, WaitTimeout: o.WaitTimeout, Revisions: o.Revisions}
}

// Agent is the continuous reconciliation loop: it polls the source, keeps
// resource IDs on a rate-limited work queue, and converges each through
// the engine (reconcile.Session.Converge), which decides everything; the
// agent maps what it says to queue verbs, metrics and status. It is split
// by what it does, each part owning its fields under its own lock: the
// revision loop (fetch, admit, trial: revs), the key loop (queue, hints,
// scopes: keys), the report (pub) and the watch on the state dir
// (stateDir). A reader of two parts takes one lock after the other, never
// both at once.
type Agent struct {
	opts  Options
	log   *slog.Logger
	fight *FightDetector
	ready chan struct{} // closed once the session is open
	// sess is set before ready is closed, then never again.
	sess *reconcile.Session
	// bg are refreshes and trial looks beside the loops, waited for
	// before closing.
	bg sync.WaitGroup

	// eventLog is the state dir's event log, open while Run runs.
	eventLog atomic.Pointer[events.Log]

	revs     revisionLoop
	keys     keyLoop
	pub      reporter
	stateDir stateWatch
	// fights are the resources told fighting (FightStarted), until told
	// ended.
	fights struct {
		sync.Mutex
		on map[resource.ID]bool
	}
	// watchTest stands in for the kernel's watches in tests: wrap wraps
	// the watcher's add (nil: the kernel's alone); base and max bound its
	// retry (zero: the defaults).
	watchTest struct {
		wrap      func(add func(dir string) error) func(dir string) error
		base, max time.Duration
	}
}

// revisionLoop is the poll loop's: what it fetches, admits and tries. Its
// channels are fixed at New; mu guards the rest.
type revisionLoop struct {
	fetch chan Trigger // a fetch and full pass now
	// do runs work on the poll loop, which fetches and adopts revisions:
	// verdicts, rollbacks, retries.
	do   chan func(context.Context)
	quit chan struct{} // closed when the poll loop ends
	poke chan struct{} // look at the revision on trial now
	// fleetPoke has the host's state handed to the coordinator soon.
	fleetPoke chan struct{}
	life      *reconcile.Life // the revisions of the session, set with it

	mu       sync.Mutex
	fetchErr error // the last fetch or validation failure
	// fetchFailing is when the fetches began to fail (zero while they
	// succeed): the log says how long they failed when one recovers.
	fetchFailing time.Time
	// refused is the newest revision, when it was refused (invalid).
	refused   *reconcile.Refusal
	fetchTime time.Time // the last successful fetch
	// head is the source's newest revision, as last fetched; heldBack
	// says why it is not applied, when it is not.
	head     string
	heldBack *reconcile.Refusal
	// headSeen is when head was first fetched; rollouts are the rollout:
	// of the revisions fetched lately (fleet.go); waiting is a revision the
	// fleet did not admit yet, asked for again when it wakes the agent.
	headSeen time.Time
	rollouts map[string]*resource.Rollout
	waiting  *reconcile.Desired
	// trial is the revision on trial, and trialStop ends its look.
	trial     *reconcile.Trial
	trialStop context.CancelFunc
	// rolledTo is the pin whose rollback was last said converged.
	rolledTo *state.Pin
	// followFails counts the failures in a row to load the revision a
	// rollback holds the host on.
	followFails int
	// applied is the revision last told applied in full; gated, the
	// newest fetched that takes a rollout slot; paused, the rollout pause
	// last told; lost, the coordinator's trouble last told.
	applied, gated, paused, lost string
	// windows are the deploy windows of the revisions fetched lately
	// (window.go); windowWait is the window the newest waits for, and
	// windowTimer fetches again when it opens.
	windows     map[string]reconcile.Windows
	windowWait  *reconcile.WindowError
	windowTimer *time.Timer
}

// keyLoop is the workers': the queue of keys and what each one is owed.
type keyLoop struct {
	queue workqueue.TypedRateLimitingInterface[resource.ID]
	// inflight counts keys a worker took off the queue and has not
	// finished: the queue's length leaves them out.
	inflight atomic.Int32

	mu      sync.Mutex
	retired []*reconcile.Desired // closed when no key is in flight
	started bool                 // the first reconcile is done
	// firstPass holds the keys of the first revision not yet reconciled
	// once: the first reconcile is done when it empties (or when the
	// queue settles), however busy the queue stays with other work.
	firstPass map[resource.ID]struct{}
	episode   *Reconcile
	hints     map[resource.ID]hintOf
	scopes    map[resource.ID]*scopeOf // see scope.go
	// held are the keys the engine holds back (waiting, blocked or
	// refused), with why: status shows them.
	held map[resource.ID]diff.Outcome
	// unobserved are the keys the last scan could not observe, with why.
	unobserved map[resource.ID]error
	watch      *watcher
	rewatch    []resource.ID // made paths (an apply, a parent came to be): their watches follow
	history    []Reconcile
}

// reporter writes the agent's report (agent.json) as things change.
type reporter struct {
	address atomic.Pointer[listening] // where the API listens, for the report
	since   time.Time                 // when Run started

	mu         sync.Mutex
	publishing *time.Timer // a report to write soon
	// unpublished: the agent stops and its report is gone for good.
	unpublished bool
	wpub        sync.Mutex // one write of the report at a time
}

// stateWatch is what the agent knows of its state dir beside the writer.
type stateWatch struct {
	// check asks for a look at the state dir (its procs went); lost: the
	// writer found state.json gone and saved it again.
	stateCheck chan struct{}
	stateLost  atomic.Bool
	// foreign: another cortex-sync saved the snapshot; it may have applied
	// a newer revision than the agent's, so nothing more is applied until
	// the source is fetched again (reloads counts those saves).
	foreign atomic.Bool
	reloads atomic.Int64
}

// New makes an agent; Run starts it.
func New(opts Options) *Agent {
	opts.defaults()
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[resource.ID](opts.RetryBase, opts.RetryMax)
	cfg := workqueue.TypedRateLimitingQueueConfig[resource.ID]{Name: "resources", MetricsProvider: opts.Metrics.Workqueue}
	return &Agent{
		opts:  opts,
		log:   opts.Log,
		fight: NewFightDetector(FightOptions{Threshold: opts.FightThreshold, Window: opts.FightWindow, Settle: opts.FightSettle}),
		ready: make(chan struct{}),
		revs: revisionLoop{
			fetch:     make(chan Trigger, 1),
			do:        make(chan func(context.Context), 4),
			quit:      make(chan struct{}),
			poke:      make(chan struct{}, 1),
			fleetPoke: make(chan struct{}, 1),
			rollouts:  map[string]*resource.Rollout{},
		},
		keys: keyLoop{
			queue:      workqueue.NewTypedRateLimitingQueueWithConfig(limiter, cfg),
			hints:      map[resource.ID]hintOf{},
			unobserved: map[resource.ID]error{},
			scopes:     map[resource.ID]*scopeOf{},
			held:       map[resource.ID]diff.Outcome{},
		},
		stateDir: stateWatch{stateCheck: make(chan struct{}, 1)},
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
	sess.Policy = a.opts.policy()
	sess.Suspend(a.opts.Suspend)
	sess.AddHold(a.fightHold)
	sess.AddHold(a.foreignHold)
	sess.AddRevisionGate(a.windowGate()) // first: outside its window, a host asks for no slot
	for _, g := range a.opts.RevisionGates {
		sess.AddRevisionGate(g)
	}
	if a.opts.Fleet != nil {
		sess.AddRevisionGate(judgeFirst{a})
		sess.AddRevisionGate(toldGate{a.opts.Fleet, a})
		a.opts.Fleet.Suspended(a.opts.Suspend)
	}
	w := sess.Writer()
	w.Busy = func() bool { return a.keys.queue.Len() > 0 }
	w.Reloaded = func(*state.Snapshot) {
		a.stateDir.reloads.Add(1)
		a.stateDir.foreign.Store(true)
		a.Reconcile(TriggerRevision) // fetched again, then everything requeued
	}
	w.Lost = func() { a.stateDir.stateLost.Store(true); a.stateGone() }
	a.sess = sess
	a.revs.life = sess.Life(a.opts.Source, a.opts.Engine.Manifests())
	if err := a.openEventLog(); err != nil {
		sess.Close()
		return err
	}
	defer a.closeEventLog()
	a.pub.since = time.Now().UTC().Truncate(time.Second)
	a.gaugeRolledBack()
	close(a.ready)
	defer a.close()
	a.publishNow()

	watch, err := newWatcher(a, sess.State.Sub("procs"), a.log, a.opts.Metrics.ProcessRestarted)
	if err != nil {
		return err
	}
	defer watch.close()
	watch.tell = a.tell
	watch.counted = a.watchesCounted
	if t := a.watchTest; t.wrap != nil {
		watch.add = t.wrap(watch.add)
		watch.retryBase, watch.retryMax = cmp.Or(t.base, watch.retryBase), cmp.Or(t.max, watch.retryMax)
	}
	a.keys.mu.Lock()
	a.keys.watch = watch
	a.keys.mu.Unlock()

	var wg sync.WaitGroup
	for range a.opts.Engine.Concurrency {
		wg.Go(func() {
			for a.work(ctx) {
			}
		})
	}
	wg.Go(func() { watch.run(ctx) })
	wg.Go(func() { a.poll(ctx, watch) })
	wg.Go(func() { a.keepStateDir(ctx, watch) })
	wg.Go(func() { a.watchFights(ctx) })
	if a.opts.Fleet != nil {
		wg.Go(func() { a.fleetLoop(ctx) })
	}
	<-ctx.Done()
	// What is in flight is finished (an apply cut short would leave the
	// host half updated), for as long as drainFor; what is still queued
	// waits for the next start, which plans everything again.
	a.log.Info("stopping: finishing what is in flight", "in_flight", a.keys.inflight.Load(), "queued", a.keys.queue.Len())
	drained := make(chan struct{})
	go func() {
		a.keys.queue.ShutDownWithDrain()
		wg.Wait()
		a.bg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainFor):
		a.log.Warn("stopping: in-flight work did not finish in time; the next start plans it again", "waited", drainFor)
	}
	a.unpublish()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushFor)
	defer cancel()
	if err := w.Flush(fctx); err != nil {
		return fmt.Errorf("save the snapshot on the way out: %w", err)
	}
	a.log.Info("stopped: the snapshot is saved")
	return nil
}

// Bounds on stopping: a stop always ends in seconds.
const (
	drainFor = 5 * time.Second
	flushFor = 3 * time.Second
)

func (a *Agent) close() {
	if d := a.sess.Desired(); d != nil {
		d.Close()
	}
	a.keys.mu.Lock()
	for _, d := range a.keys.retired {
		d.Close()
	}
	a.keys.mu.Unlock()
	a.dropWaiting()
	a.stopWindowTimer()
	a.sess.Close()
}

// session is the engine, once Run opened it; nil before.
func (a *Agent) session() *reconcile.Session {
	select {
	case <-a.ready:
		return a.sess
	default:
		return nil
	}
}

// Reconcile asks for a fetch now; asked by hand (TriggerManual), a full
// drift scan as well. A webhook's push converges what the revision
// changed, as a poll's would: the watches and the drift scan cover the
// rest of the host.
func (a *Agent) Reconcile(t Trigger) {
	select {
	case a.revs.fetch <- t:
	default: // one is already pending
	}
}

// listening is where the API listens, for the report.
type listening struct{ addr, tokenFile string }

// Listening tells the agent where its API listens and which file holds
// the token its control requests need ("" for none): the report names
// both (the file, never the token), so that a command run on the state
// dir reaches this agent, not the default address, with its token.
func (a *Agent) Listening(addr, tokenFile string) {
	a.pub.address.Store(&listening{addr: addr, tokenFile: tokenFile})
	if a.session() != nil {
		a.publishNow()
	}
}

// Suspend stops applying (observing and reporting go on); Resume undoes it.
func (a *Agent) Suspend() { a.setSuspended(true) }

func (a *Agent) setSuspended(v bool) {
	a.opts.Suspend = v
	if s := a.session(); s != nil {
		s.Suspend(v)
	}
	if a.opts.Fleet != nil {
		a.opts.Fleet.Suspended(v)
	}
	a.log.Info("agent", "suspended", v)
	a.publishNow()
}

// Ready reports whether the first reconcile is done and the source is not
// failing, and why not.
func (a *Agent) Ready() (bool, string) {
	a.revs.mu.Lock()
	refused, fetchErr := a.revs.refused, a.revs.fetchErr
	a.revs.mu.Unlock()
	a.keys.mu.Lock()
	defer a.keys.mu.Unlock()
	switch {
	case refused != nil:
		return false, "revision " + refused.Revision + " refused: " + refused.Error
	case fetchErr != nil:
		return false, "source failing: " + fetchErr.Error()
	case len(a.keys.unobserved) > 0:
		for id, err := range a.keys.unobserved {
			return false, fmt.Sprintf("cannot observe %s: %v", id, err) // one is named; status lists all
		}
	case !a.keys.started:
		return false, "the first reconcile is not done"
	}
	return true, ""
}

// poll fetches the source on its interval (and when asked), and scans for
// drift on the drift interval.
func (a *Agent) poll(ctx context.Context, w *watcher) {
	defer close(a.revs.quit)
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
		case t := <-a.revs.fetch:
			a.refresh(ctx, t, w)
		case f := <-a.revs.do:
			f(ctx)
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
// changes nothing: the revision the host is on goes on being healed.
func (a *Agent) refresh(ctx context.Context, t Trigger, w *watcher) {
	start := time.Now()
	if a.stateDir.foreign.Load() {
		gen := a.stateDir.reloads.Load()
		defer func() {
			// This fetch came after the foreign save (none since): what the
			// agent applies is the source's again, whatever that save did.
			if a.stateDir.reloads.Load() == gen && a.stateDir.foreign.CompareAndSwap(true, false) {
				a.requeueAll()
			}
		}()
	}
	d, err := reconcile.Load(ctx, a.opts.Source, a.opts.Engine.Manifests(), a.log)
	a.opts.Metrics.ObserveFetch(time.Since(start), err)
	if err != nil {
		if a.refuse(err) && a.sess.Desired() == nil {
			// Refused at start: the host heals the revision it runs.
			if d, err := a.revs.life.Heal(ctx); err != nil {
				a.log.Error("cannot load the revision the host runs", "error", err)
			} else if d != nil {
				a.adopt(ctx, nil, d, nil, TriggerRevision, start, w, nil)
				a.publishNow() // the report names the revision the host stays on
				return
			}
		}
		if t == TriggerManual {
			a.scan(ctx, t) // still heal what is there
		}
		return
	}
	a.sourceRecovered(d.Revision())
	a.revs.mu.Lock()
	refused := a.revs.refused != nil
	if a.revs.fetchErr != nil {
		a.log.Info("fetch recovered: the source answers again", "failed_for", time.Since(a.revs.fetchFailing).Round(time.Millisecond), "error", a.revs.fetchErr)
	}
	a.revs.fetchErr, a.revs.refused, a.revs.fetchTime, a.revs.fetchFailing = nil, nil, time.Now(), time.Time{}
	a.revs.mu.Unlock()
	if refused {
		a.opts.Metrics.SetRefused("")
		a.publishNow()
	}
	old := a.sess.Desired()
	a.dropWaiting() // this fetch's revision is asked for anew
	if old != nil && d.Revision() != "" && d.Revision() == old.Revision() {
		a.revs.mu.Lock()
		a.revs.head = d.Revision()
		a.revs.mu.Unlock()
		d.Close()
		a.unpin(d.Revision())
		if t == TriggerManual {
			a.scan(ctx, t)
		}
		return
	}
	a.noteWindows(d)
	var pre *changes
	if a.opts.Fleet != nil {
		pre = a.fetched(d, old)
	}
	a.revs.mu.Lock()
	fresh := d.Revision() != a.revs.head
	a.revs.head = d.Revision()
	a.revs.mu.Unlock()
	if fresh && d.Revision() != "" {
		msg := "fetched " + d.Revision()
		if old != nil && old.Revision() != "" {
			msg += "; the host is on " + old.Revision()
		}
		a.tell(events.Event{Severity: events.Info, Reason: events.RevisionFetched, Revision: d.Revision(), Message: msg})
	}
	trigger := t
	if old != nil && t == TriggerInterval {
		trigger = TriggerRevision
	}
	if a.offer(ctx, d, trigger, start, w, pre) && t == TriggerManual && old != nil {
		a.scan(ctx, t)
	}
	a.settle()
}

// offer hands d, the source's newest revision, to its life (reconcile.Life)
// and maps what was decided: held (kept to ask again when the fleet moves,
// the host staying on, or going to, the revision the hold names), or
// adopted, and on trial when it is new. It reports whether d was adopted.
func (a *Agent) offer(ctx context.Context, d *reconcile.Desired, trigger Trigger, start time.Time, w *watcher, pre *changes) bool {
	old := a.sess.Desired()
	if pre == nil {
		pre = &changes{}
		pre.keys, pre.scopes = a.sess.Changed(old, d)
	}
	out := a.revs.life.Offer(ctx, d, pre.keys, true, start)
	a.waitWindow(out.Why)
	if out.Phase == reconcile.PhaseHeld {
		if !a.holdWaiting(d, reconcile.Admission{Stay: out.Why, Pin: out.To}) {
			d.Close()
		}
		a.stay(ctx, trigger, out, old, w)
		return false
	}
	a.revs.mu.Lock()
	held := a.revs.heldBack != nil
	a.revs.heldBack = nil
	a.revs.mu.Unlock()
	if held {
		a.publishNow()
	}
	a.adopt(ctx, old, d, out.Trial, trigger, start, w, pre)
	return true
}

// adopt queues what d, now the revision the host converges to in place of
// old, changes (pre, when it was worked out already), and looks at its
// trial, when it is on one.
func (a *Agent) adopt(ctx context.Context, old, d *reconcile.Desired, trial *reconcile.Trial, trigger Trigger, start time.Time, w *watcher, pre *changes) {
	if pre == nil {
		pre = &changes{}
		pre.keys, pre.scopes = a.sess.Changed(old, d)
	}
	keys, scopes := pre.keys, pre.scopes
	if a.opts.Fleet != nil {
		a.opts.Fleet.Singletons(singletons(d))
	}
	a.keys.mu.Lock()
	if old != nil {
		a.keys.retired = append(a.keys.retired, old)
	}
	// The first pass is of the newest desired set: one replaced before its
	// first pass ended (its manifests deleted meanwhile) would leave keys
	// no worker takes again, and the agent never ready.
	if !a.keys.started && (a.keys.firstPass == nil || old != nil) {
		a.keys.firstPass = make(map[resource.ID]struct{}, len(keys))
		for _, id := range keys {
			a.keys.firstPass[id] = struct{}{}
		}
	}
	a.keys.mu.Unlock()
	if err := a.sess.PruneHold(); err != nil {
		a.log.Warn("not pruning", "reason", err)
	}
	a.log.Info("revision adopted: applying what it changes", "revision", d.Revision(), "changed", len(keys))
	a.stopTrial()
	a.gaugeRolledBack()
	if trial != nil {
		a.try(ctx, trial)
	}
	a.begin(trigger, d.Revision(), start)
	for _, id := range keys {
		if paths := scopes[id]; len(paths) > 0 {
			for _, p := range paths {
				a.narrow(id, p) // what the commit changed in the tree, alone
			}
			a.keys.queue.Add(id)
			continue
		}
		a.enqueue(id)
	}
	if old == nil {
		w.sync(a.sess.Watches())
		return
	}
	// What changed whole is watched anew; entries changed in a tree keep
	// its watches (a directory made in it is seen by them).
	var whole []resource.ID
	for _, id := range keys {
		if len(scopes[id]) == 0 {
			whole = append(whole, id)
		}
	}
	w.update(whole, a.sess.WatchesOf(whole))
}

// refuse keeps a failed fetch, or a revision refused (its signatures fail
// verification, its manifests do not validate): the host stays on the
// revision it has. It reports whether a revision was refused.
func (a *Agent) refuse(err error) bool {
	defer a.publishNow()
	var told []events.Event // told once the lock is let go
	defer func() {
		for _, e := range told {
			a.tell(e)
		}
	}()
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	told = append(told, a.sourceFailing(err)...)
	var me *reconcile.ManifestError
	var ue *source.UntrustedError
	var r *reconcile.Refusal
	switch {
	case errors.As(err, &ue):
		r = &reconcile.Refusal{Revision: ue.Revision, Reason: RefusedSignature, Commit: ue.Object, Signer: ue.Signer, Why: ue.Why}
	case errors.As(err, &me):
		r = &reconcile.Refusal{Revision: me.Revision, Reason: RefusedManifests}
	default:
		if a.revs.fetchErr == nil {
			a.revs.fetchFailing = time.Now()
		}
		a.revs.fetchErr = err
		a.log.Error("fetch failed; the host stays on the revision it has", "error", err)
		return false
	}
	if r.Revision == "" {
		r.Revision = "the source's newest"
	}
	r.Error = err.Error()
	if old := a.revs.refused; old == nil || old.Revision != r.Revision || old.Error != r.Error {
		r.Since = time.Now().UTC().Truncate(time.Second)
		a.revs.refused = r
		log := a.log.With("revision", r.Revision, "reason", r.Reason)
		if r.Reason == RefusedSignature {
			log = log.With("commit", r.Commit, "signer", r.Signer)
		}
		log.Error("revision refused; the host stays on the revision it has", "error", err)
		told = append(told, events.Event{Severity: events.Error, Reason: events.RevisionRefused, Revision: r.Revision, Condition: condRevision,
			Message: r.Summary() + "; the host stays on the revision it has"})
	}
	a.opts.Metrics.SetRefused(r.Reason)
	a.revs.fetchErr = nil
	return true
}

// scan observes everything and queues what is not converged: the full
// drift check, the safety net under the watches.
func (a *Agent) scan(ctx context.Context, t Trigger) {
	d := a.sess.Desired()
	if d == nil {
		return
	}
	due, problems := a.sess.Scan(ctx)
	a.keys.mu.Lock()
	a.keys.unobserved = map[resource.ID]error{}
	for _, c := range problems {
		a.keys.unobserved[c.ID] = c.Err
	}
	a.keys.mu.Unlock()
	for _, c := range problems {
		a.log.Error("cannot observe", "resource", c.ID, "error", c.Err)
		a.opts.Metrics.ObserveError(c.Kind)
	}
	a.publish()
	for _, id := range due {
		a.enqueue(id)
	}
	if len(due) > 0 {
		a.begin(t, d.Revision(), time.Now())
		a.log.Info("scan", "trigger", t, "pending", len(due))
	}
	a.settle()
}

// requeueAll queues every key: another cortex-sync wrote the snapshot, so
// everything is planned again against it.
func (a *Agent) requeueAll() {
	if d := a.sess.Desired(); d != nil {
		for _, r := range d.Set.Resources() {
			a.enqueue(r.ID())
		}
	}
	for _, e := range a.sess.View().Inventory {
		a.enqueue(resource.ID(e.ID))
	}
}
