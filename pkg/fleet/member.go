package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// MemberConfig is a host's part in the fleet.
type MemberConfig struct {
	Host resource.Host
	// PresenceTTL is the presence lease's TTL: a host is stale this long
	// after its agent stopped answering (default 30 s).
	PresenceTTL time.Duration
	// SlotTTL is the TTL of the lease a host's rollout slot and place in
	// the rollout's queue live on: an offline host's slot frees this long
	// after its agent stopped (default 10 s, or PresenceTTL if shorter).
	// It is its own lease so that presence may be longer without holding
	// a slot longer.
	SlotTTL time.Duration
	// Debounce is how long a status change waits for the next before it is
	// written (default 1 s): a status key is written on change, not per
	// reconcile.
	Debounce time.Duration
	// MaintenanceFile, when set, is checked by Admit: while it exists the
	// host takes no slot (see Maintenance).
	MaintenanceFile string
}

// Defaults of a MemberConfig.
const (
	DefaultPresenceTTL = 30 * time.Second
	DefaultSlotTTL     = 10 * time.Second
	DefaultDebounce    = time.Second
)

// HostStatus is what a host says of itself in its status key.
type HostStatus struct {
	// Schema is the version of the record (see Schema).
	Schema int               `json:"schema,omitempty"`
	Host   string            `json:"host"`
	Labels map[string]string `json:"labels,omitempty"`
	// Revision is the revision applied; Head the newest one fetched (the
	// ref's head as this host saw it), HeadTime its commit time.
	Revision string    `json:"revision,omitempty"`
	Head     string    `json:"head,omitempty"`
	HeadTime time.Time `json:"headTime,omitzero"`
	Sync     string    `json:"sync,omitempty"`   // Synced, OutOfSync, …
	Health   string    `json:"health,omitempty"` // Healthy, Degraded, …
	// LastGood is the last revision that passed the health gate here.
	LastGood string `json:"lastGood,omitempty"`
	// RolloutPhase is the host's part in the rollout of Head: see Phase*.
	RolloutPhase string   `json:"rolloutPhase,omitempty"`
	Fighting     []string `json:"fighting,omitempty"`
	LastError    string   `json:"lastError,omitempty"`
	// WindowOpens is when the deploy window opens that the host waits
	// for to take Head (fleet.yaml windows:); zero when it waits for none.
	WindowOpens time.Time `json:"windowOpens,omitzero"`
	// Time is when the status was written (the writer's clock).
	Time time.Time `json:"time"`
}

// Rollout phases a host reports.
const (
	PhaseApplying = "applying" // holds a slot: applying Head, waiting for it to be good
	PhaseGood     = "good"     // Head was good here
	PhaseBad      = "bad"      // Head was bad here; the host went back to its last good
	// PhaseWindow: the host waits for its deploy window to take Head;
	// it holds no slot and blocks no one (fleet status only).
	PhaseWindow = "window"
)

func (s HostStatus) same(o HostStatus) bool {
	s.Time, o.Time = time.Time{}, time.Time{}
	s.Schema, o.Schema = 0, 0
	return reflect.DeepEqual(s, o)
}

// Member is a host in the fleet: present on a lease, writing its status,
// taking rollout slots and reporting verdicts.
type Member struct {
	*Client
	host        resource.Host
	ttl         time.Duration
	slotTTL     time.Duration
	debounce    time.Duration
	maintenance string

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	lease      clientv3.LeaseID // 0 while not present
	slotLease  clientv3.LeaseID // 0 while not granted: slots and queue entries live on it
	want       HostStatus       // the status to be written
	written    *HostStatus      // the status last written
	quietUntil time.Time        // status rides in the rollout's next transaction until then
	holding    string           // the revision whose slot this host holds
	slot       string           // the key of that slot
	queued     int64            // the create revision of this host's queue key; 0 when not queued
	askedAt    time.Time        // when the host last asked for a slot
	stall      *time.Timer      // frees the slot when its holder is past its deadline
	target     watchTarget      // what a waiting host watches
	retarget   chan struct{}    // target changed
	waiting    bool             // the last Admit said no: a new head alone is not written
	ignored    []Ignored        // the records the last Admit read and ignored
	poke       chan struct{}
	changed    chan struct{} // closed on a change that may let the waiting host go
	closed     bool          // changed is closed
	fold       chan struct{} // foldSoon asks the folder (gc.go) to fold old rollouts
}

// Join makes the host present in the fleet and starts writing its status.
// It does not wait for etcd: presence is taken, and status flushed, as
// soon as etcd answers.
func Join(c *Client, cfg MemberConfig) (*Member, error) {
	if err := checkName(cfg.Host.Name); err != nil {
		return nil, fmt.Errorf("host name %q: %w", cfg.Host.Name, err)
	}
	if cfg.PresenceTTL <= 0 {
		cfg.PresenceTTL = DefaultPresenceTTL
	}
	if cfg.SlotTTL <= 0 {
		cfg.SlotTTL = min(DefaultSlotTTL, cfg.PresenceTTL)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = DefaultDebounce
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Member{
		Client: c, host: cfg.Host, ttl: cfg.PresenceTTL, slotTTL: cfg.SlotTTL, debounce: cfg.Debounce, maintenance: cfg.MaintenanceFile,
		cancel: cancel, poke: make(chan struct{}, 1), changed: make(chan struct{}), retarget: make(chan struct{}, 1), fold: make(chan struct{}, 1),
		want: HostStatus{Host: cfg.Host.Name, Labels: maps.Clone(cfg.Host.Labels)},
	}
	m.wg.Add(6)
	go m.presence(ctx)
	go m.slots(ctx)
	go m.idle(ctx)
	go m.writer(ctx)
	go m.watch(ctx)
	go m.folder(ctx)
	return m, nil
}

// Host is the member's name.
func (m *Member) Host() string { return m.host.Name }

// Close stops the member and revokes its presence (a clean stop: the host
// shows stale at once), then closes the client.
func (m *Member) Close() error {
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	leases := []clientv3.LeaseID{m.lease, m.slotLease}
	m.mu.Unlock()
	for _, lease := range leases {
		if lease != 0 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			m.cli.Revoke(ctx, lease) // best effort: else it expires
			cancel()
		}
	}
	return m.Client.Close()
}

// Ignored are the records of the fleet's keys the host's last request for
// a slot read and ignored, with why: the host's status shows them.
func (m *Member) Ignored() []Ignored {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.ignored)
}

// Present reports whether the host holds its presence lease now.
func (m *Member) Present() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease != 0
}

// presence keeps the presence key on a lease, granting a new lease when
// the old one is lost (etcd down longer than the TTL).
func (m *Member) presence(ctx context.Context) {
	defer m.wg.Done()
	m.keep(ctx, "presence", m.ttl, &m.lease, func(ctx context.Context, id clientv3.LeaseID) error {
		v, _ := json.Marshal(presenceDoc{Schema: Schema, Host: m.host.Name, Labels: m.host.Labels, Since: time.Now()})
		_, err := m.cli.Put(ctx, m.key("presence", m.host.Name), string(v), clientv3.WithLease(id))
		return err
	})
}

// slots keeps the slot lease: what this host holds of a rollout (its
// slot, its place in the queue) lives on it.
func (m *Member) slots(ctx context.Context) {
	defer m.wg.Done()
	m.keep(ctx, "slot", m.slotTTL, &m.slotLease, func(context.Context, clientv3.LeaseID) error {
		m.mu.Lock()
		m.queued, m.slot = 0, "" // what lived on the lease before went with it
		m.mu.Unlock()
		return nil
	})
}

// keep keeps a lease of ttl alive in *lease (0 while there is none),
// granting a new one, and calling put with it, when it is lost.
func (m *Member) keep(ctx context.Context, what string, ttl time.Duration, lease *clientv3.LeaseID, put func(context.Context, clientv3.LeaseID) error) {
	for ctx.Err() == nil {
		var id clientv3.LeaseID
		err := m.call(ctx, func(ctx context.Context) error {
			g, err := m.cli.Grant(ctx, int64(ttl.Seconds()+0.5))
			if err != nil {
				return err
			}
			id = g.ID
			return put(ctx, id)
		})
		if err != nil {
			sleep(ctx, probeEvery)
			continue
		}
		kctx, kcancel := context.WithCancel(ctx)
		ch, err := m.cli.KeepAlive(kctx, id)
		if err != nil {
			kcancel()
			sleep(ctx, probeEvery)
			continue
		}
		m.mu.Lock()
		*lease = id
		m.mu.Unlock()
		m.wake() // flush the status: it may not have reached etcd while down
		m.broadcast()
		for range ch {
		}
		kcancel()
		if ctx.Err() != nil {
			return // closed: Close revokes the lease
		}
		m.mu.Lock()
		*lease = 0
		m.mu.Unlock()
		m.log.Warn("fleet "+what+" lease lost; taking it again", "host", m.host.Name)
	}
}

type presenceDoc struct {
	Schema int               `json:"schema,omitempty"`
	Host   string            `json:"host"`
	Labels map[string]string `json:"labels,omitempty"`
	Since  time.Time         `json:"since"`
}

// SetStatus records the host's status; it is written when it changed,
// Debounce after the last change, or with the next rollout step.
func (m *Member) SetStatus(s HostStatus) {
	m.mu.Lock()
	s.Host, s.Labels = m.host.Name, maps.Clone(m.host.Labels)
	s.RolloutPhase = m.want.RolloutPhase // the rollout steps own it
	m.want = s
	m.mu.Unlock()
	m.wake()
}

func (m *Member) wake() {
	select {
	case m.poke <- struct{}{}:
	default:
	}
}

// writer writes the status Debounce after a change, and again each
// second while etcd does not take it.
func (m *Member) writer(ctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.poke:
		}
		for {
			if !sleep(ctx, m.debounce) {
				return
			}
			if !m.quiet(ctx) {
				return
			}
			ops, s := m.statusOps(nil)
			if ops == nil {
				break
			}
			err := m.call(ctx, func(ctx context.Context) error {
				_, err := m.cli.Txn(ctx).Then(ops...).Commit()
				return err
			})
			if err == nil {
				m.wrote(s)
				break
			}
		}
	}
}

// quiet waits while the host holds a slot (its status rides in the
// verdict's transaction), for at most minReady and a few seconds; it
// reports false when ctx ended.
func (m *Member) quiet(ctx context.Context) bool {
	for {
		m.mu.Lock()
		wait := time.Until(m.quietUntil)
		m.mu.Unlock()
		if wait <= 0 {
			return true
		}
		if !sleep(ctx, min(wait, 200*time.Millisecond)) {
			return false
		}
	}
}

// statusOps are the operations that write the status, changed by edit
// (nil: as it is), and the status they write; nil when it is already
// written. Nothing is recorded: the caller calls wrote once etcd took it.
func (m *Member) statusOps(edit func(*HostStatus)) ([]clientv3.Op, HostStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.want
	if edit != nil {
		edit(&s)
	}
	// Bounded, so that no reader ignores it as too large (record.go).
	s.LastError = clip(s.LastError, maxTextBytes)
	if len(s.Fighting) > maxListed {
		s.Fighting = append(s.Fighting[:maxListed:maxListed], fmt.Sprintf("and %d more", len(s.Fighting)-maxListed))
	}
	if m.written != nil && (m.written.same(s) || m.waiting && headOnly(*m.written, s)) {
		return nil, s
	}
	s.Time = time.Now().UTC()
	s.Schema = Schema
	v, _ := json.Marshal(s)
	return []clientv3.Op{clientv3.OpPut(m.key("status", m.host.Name), string(v))}, s
}

// headOnly reports whether b differs from a in its head alone: a host that
// waits for a slot does not write the head it waits to apply (the rollout
// shows it waiting); the head rides in the slot's transaction.
func headOnly(a, b HostStatus) bool {
	a.Head, a.HeadTime = b.Head, b.HeadTime
	return a.same(b)
}

// wrote records s as written; its rollout phase and head are the host's
// from now on.
func (m *Member) wrote(s HostStatus) {
	m.mu.Lock()
	m.written = &s
	m.want.RolloutPhase = s.RolloutPhase
	if m.want.Head == "" {
		m.want.Head = s.Head
	}
	m.mu.Unlock()
}

// phase is an edit that sets the rollout phase of rev.
func phase(rev, p string) func(*HostStatus) {
	return func(s *HostStatus) {
		s.RolloutPhase = p
		if s.Head == "" {
			s.Head = rev // the engine did not say what it fetched
		}
	}
}

// watchTarget is what a host that may not take a slot yet watches: the
// one key (or small prefix) whose change may let it go, from the revision
// after the read that said no. The hold key is watched besides, always.
type watchTarget struct {
	keys []watchKey
	from int64
}

type watchKey struct {
	key    string
	prefix bool
}

// watchFor sets what the waiting host watches (none: nothing but its hold).
func (m *Member) watchFor(t watchTarget) {
	m.mu.Lock()
	same := reflect.DeepEqual(m.target.keys, t.keys)
	if !same || t.from < m.target.from {
		m.target = t
	}
	m.mu.Unlock()
	if !same {
		select {
		case m.retarget <- struct{}{}:
		default:
		}
	}
}

// watch wakes a waiting host (Changed) on a change to what it waits for
// and to its hold. A waiter watches one key, not the fleet's slots: the
// one ahead of it in the queue, or the slots when it is at the front, or
// its rollout's control while the rollout is stopped.
func (m *Member) watch(ctx context.Context) {
	defer m.wg.Done()
	for ctx.Err() == nil {
		m.mu.Lock()
		t := m.target
		m.mu.Unlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		chans := []clientv3.WatchChan{m.cli.Watch(wctx, m.key("hold", m.host.Name))}
		for _, k := range t.keys {
			opts := []clientv3.OpOption{}
			if t.from > 0 {
				opts = append(opts, clientv3.WithRev(t.from))
			}
			if k.prefix {
				opts = append(opts, clientv3.WithPrefix())
			}
			chans = append(chans, m.cli.Watch(wctx, k.key, opts...))
		}
		merged := make(chan bool, len(chans))
		for _, ch := range chans {
			go func() {
				for range ch {
					select {
					case merged <- true:
					default:
					}
				}
				select {
				case merged <- false: // ended: leader lost, compacted, retargeted
				case <-wctx.Done():
				}
			}()
		}
		ended := false
		for !ended {
			select {
			case <-ctx.Done():
				ended = true
			case <-m.retarget:
				ended = true
			case ok := <-merged:
				if !ok {
					cancel()
					m.mu.Lock()
					m.target.from = 0 // compacted, perhaps: watch from now
					m.mu.Unlock()
					m.broadcast() // what it waited for may have changed meanwhile
					sleep(ctx, probeEvery)
					ended = true
					break
				}
				m.broadcast()
			}
		}
		cancel()
	}
}

// broadcast closes Changed: what the host waits for changed.
func (m *Member) broadcast() {
	m.mu.Lock()
	if !m.closed {
		close(m.changed)
		m.closed = true
	}
	m.mu.Unlock()
}

// rearm makes a new Changed, at the start of a request: a change after
// the request read is then seen by whoever waits on Changed after it.
func (m *Member) rearm() {
	m.mu.Lock()
	if m.closed {
		m.changed, m.closed = make(chan struct{}), false
	}
	m.mu.Unlock()
}

// Changed is closed at the next change, after the host's last request
// for a slot read, of what it waits for: the host ahead of it in the
// queue, a slot (at the front), its rollout's control, its hold. A
// waiting host asks again then, or at the Decision's RetryAfter.
func (m *Member) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// sleep waits d or until ctx ends, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
