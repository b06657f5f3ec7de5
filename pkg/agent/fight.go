package agent

import (
	"slices"
	"sync"
	"time"
)

// Defaults of FightOptions.
const (
	DefaultFightThreshold   = 5
	DefaultFightWindow      = 10 * time.Minute
	DefaultFightBaseBackoff = 30 * time.Second
	DefaultFightMaxBackoff  = 10 * time.Minute
)

// FightOptions tune a FightDetector; zero fields take the defaults.
type FightOptions struct {
	// Threshold: a resource corrected more than this many times within
	// Window is fighting.
	Threshold int
	Window    time.Duration
	// BaseBackoff is the hold-off after the first correction past the
	// threshold; each further one doubles it, up to MaxBackoff.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
	Now         func() time.Time
}

// Fight is what a FightDetector knows of one resource.
type Fight struct {
	Corrections int           // corrections within the window (counted up to threshold+64)
	Fighting    bool          // Corrections > threshold
	Backoff     time.Duration // hold-off before the next correction; 0 when not fighting
	NotBefore   time.Time     // last correction + Backoff; zero when not fighting
}

// FightDetector records drift corrections per resource ID and reports a
// resource as fighting when something else on the host keeps undoing what
// cortex-sync applies (another tool, a package upgrade, a person). The loop
// then holds off its next correction for an exponential, capped backoff
// instead of flapping the resource. Events older than the window are
// forgotten. It is safe for concurrent use.
type FightDetector struct {
	threshold     int
	window        time.Duration
	base, ceiling time.Duration
	now           func() time.Time

	mu        sync.Mutex
	events    map[string][]time.Time // oldest first, all within the window
	lastSweep time.Time
}

// NewFightDetector returns a detector with o's settings.
func NewFightDetector(o FightOptions) *FightDetector {
	d := &FightDetector{
		threshold: cmpOr(o.Threshold, DefaultFightThreshold),
		window:    cmpOr(o.Window, DefaultFightWindow),
		base:      cmpOr(o.BaseBackoff, DefaultFightBaseBackoff),
		ceiling:   cmpOr(o.MaxBackoff, DefaultFightMaxBackoff),
		now:       o.Now,
		events:    map[string][]time.Time{},
	}
	if d.now == nil {
		d.now = time.Now
	}
	d.ceiling = max(d.ceiling, d.base)
	return d
}

// Record notes one correction of id now and returns its state after it.
func (d *FightDetector) Record(id string) Fight {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	d.sweep(now)
	ev := append(d.trim(id, now), now)
	// Only the count within the window matters, and past the threshold
	// only until the backoff reaches its ceiling: keep a bounded tail.
	if limit := d.threshold + 64; len(ev) > limit {
		ev = slices.Delete(ev, 0, len(ev)-limit)
	}
	d.events[id] = ev
	return d.fight(ev)
}

// Status is id's state now, without recording anything.
func (d *FightDetector) Status(id string) Fight {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fight(d.trim(id, d.now()))
}

// Fighting lists the IDs fighting now, sorted.
func (d *FightDetector) Fighting() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	var ids []string
	for id := range d.events {
		if d.fight(d.trim(id, now)).Fighting {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Forget drops everything known about id (it left the desired state).
func (d *FightDetector) Forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.events, id)
}

// trim drops id's events that left the window and returns the rest.
func (d *FightDetector) trim(id string, now time.Time) []time.Time {
	ev := d.events[id]
	cut := now.Add(-d.window)
	i := 0
	for i < len(ev) && !ev[i].After(cut) {
		i++
	}
	if i == len(ev) {
		delete(d.events, id)
		return nil
	}
	if i > 0 {
		ev = slices.Delete(ev, 0, i)
		d.events[id] = ev
	}
	return ev
}

// sweep trims every ID once per window so IDs never corrected again do
// not stay forever.
func (d *FightDetector) sweep(now time.Time) {
	if now.Sub(d.lastSweep) < d.window {
		return
	}
	d.lastSweep = now
	for id := range d.events {
		d.trim(id, now)
	}
}

func (d *FightDetector) fight(ev []time.Time) Fight {
	f := Fight{Corrections: len(ev)}
	excess := len(ev) - d.threshold
	if excess <= 0 {
		return f
	}
	f.Fighting = true
	f.Backoff = d.base
	for i := 1; i < excess && f.Backoff < d.ceiling; i++ {
		f.Backoff *= 2
	}
	f.Backoff = min(f.Backoff, d.ceiling)
	f.NotBefore = ev[len(ev)-1].Add(f.Backoff)
	return f
}

// cmpOr is v, or def when v is not positive.
func cmpOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
