package agent

import (
	"slices"
	"sync"
	"time"
)

// Defaults of FightOptions.
const (
	DefaultFightThreshold = 5
	DefaultFightWindow    = 10 * time.Minute
	DefaultFightSettle    = 2 * time.Second
)

// FightOptions tune a FightDetector; zero fields take the defaults.
type FightOptions struct {
	// Threshold: a resource corrected more than this many times within
	// Window is fighting.
	Threshold int
	Window    time.Duration
	// Settle: a fighting resource is corrected once nothing has disturbed
	// it for this long, so a host attacked converges as soon as the attack
	// ends rather than after a backoff.
	Settle time.Duration
	Now    func() time.Time
}

// Fight is what a FightDetector knows of one resource.
type Fight struct {
	Corrections int  // corrections within the window (counted up to threshold+64)
	Fighting    bool // Corrections > threshold
	// NotBefore is when a fighting resource may be corrected next: Settle
	// after it was last disturbed; zero when not fighting.
	NotBefore time.Time
}

// FightDetector records drift corrections per resource ID and reports a
// resource as fighting when something else on the host keeps undoing what
// cortex-sync applies (another tool, a package upgrade, a person). While
// it fights, its next correction waits until it has been left alone for a
// settle time: it is not flapped while the other side writes, and is put
// right soon after the other side stops. Events older than the window are
// forgotten. It is safe for concurrent use.
type FightDetector struct {
	threshold int
	window    time.Duration
	settle    time.Duration
	now       func() time.Time

	mu        sync.Mutex
	events    map[string][]time.Time // corrections, oldest first, all within the window
	disturbed map[string]time.Time   // when each was last seen changed
	lastSweep time.Time
}

// NewFightDetector returns a detector with o's settings.
func NewFightDetector(o FightOptions) *FightDetector {
	d := &FightDetector{
		threshold: cmpOr(o.Threshold, DefaultFightThreshold),
		window:    cmpOr(o.Window, DefaultFightWindow),
		settle:    cmpOr(o.Settle, DefaultFightSettle),
		now:       o.Now,
		events:    map[string][]time.Time{},
		disturbed: map[string]time.Time{},
	}
	if d.now == nil {
		d.now = time.Now
	}
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
	// only as a count: keep a bounded tail.
	if limit := d.threshold + 64; len(ev) > limit {
		ev = slices.Delete(ev, 0, len(ev)-limit)
	}
	d.events[id] = ev
	return d.fight(id, ev)
}

// Disturbed notes that something changed id on the host now.
func (d *FightDetector) Disturbed(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.disturbed[id] = d.now()
}

// Status is id's state now, without recording anything.
func (d *FightDetector) Status(id string) Fight {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fight(id, d.trim(id, d.now()))
}

// Fighting lists the IDs fighting now, sorted.
func (d *FightDetector) Fighting() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	var ids []string
	for id := range d.events {
		if d.fight(id, d.trim(id, now)).Fighting {
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
	delete(d.disturbed, id)
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
		if t, ok := d.disturbed[id]; ok && !t.After(cut) {
			delete(d.disturbed, id)
		}
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
	for id, t := range d.disturbed {
		if _, ok := d.events[id]; !ok && now.Sub(t) >= d.window {
			delete(d.disturbed, id)
		}
	}
}

func (d *FightDetector) fight(id string, ev []time.Time) Fight {
	f := Fight{Corrections: len(ev)}
	if len(ev) <= d.threshold {
		return f
	}
	f.Fighting = true
	last := ev[len(ev)-1]
	if t := d.disturbed[id]; t.After(last) {
		last = t
	}
	f.NotBefore = last.Add(d.settle)
	return f
}

// cmpOr is v, or def when v is not positive.
func cmpOr[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
