//go:build linux

package supervise

import (
	"fmt"
	"path/filepath"
	"time"
)

// A singleton's unit keeps to its fence (fence.go): it starts the process
// only while the fence is valid, waits in standby while it is not, and
// stops the process when the fence passes unrenewed.

// fenceTick is how often a singleton's unit looks at its fence. The fence
// is on CLOCK_BOOTTIME: a Go timer set for it would run on CLOCK_MONOTONIC
// and fire late after a suspend, so the clock is read on a short tick.
const fenceTick = 50 * time.Millisecond

// fence reads the unit's fence and says whether it lets the process run
// now. An unreadable fence lets nothing run.
func (u *unit) fence() (*Fence, bool) {
	f, err := ReadFence(filepath.Dir(u.s.procs), u.name)
	if err != nil {
		return nil, false
	}
	return f, f.Valid(BootTime(), BootID())
}

// fenceWhy says why a fence does not let the process run.
func fenceWhy(f *Fence) string {
	switch {
	case f == nil:
		return "no fence: no agent of a fleet runs on this state dir, and a singleton runs only on the fleet host that holds it"
	case f.Boot != BootID():
		return "its fence is of an earlier boot"
	case f.Note != "":
		return f.Note
	case f.Holder != "":
		return "its fence passed (held by " + f.Holder + " when last renewed)"
	}
	return "its fence passed: no renewal of the singleton's lease came in time"
}

// standby waits, nothing running, until the singleton's fence is valid;
// it reports false when the unit ends instead (its spec removed, or the
// supervisor leaves). A new spec that comes meanwhile is taken on.
func (u *unit) standby() bool {
	f, ok := u.fence()
	if ok {
		u.update(func(st *Status) { st.Holder, st.NoFence = f.Holder, false })
		return true
	}
	u.enterStandby(f)
	t := time.NewTicker(fenceTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			g, ok := u.fence()
			if ok {
				u.logf("%s: its fence is valid: this host holds the singleton; starting it", u.name)
				u.update(func(st *Status) { st.Holder, st.NoFence, st.Message = g.Holder, false, "" })
				return true
			}
			if fenceWhy(g) != fenceWhy(f) || (g == nil) != (f == nil) || g != nil && g.Holder != f.Holder {
				f = g
				u.enterStandby(f)
			}
		case <-u.s.quit:
			return false
		case spec := <-u.specs:
			switch {
			case spec == nil:
				u.update(func(st *Status) { *st = u.final(Stopped) })
				return false
			case spec.Hold:
				u.useSpec(spec) // the loop writes the hold
				return true
			case spec.Hash != u.spec.Hash || spec.RestartGen != u.spec.RestartGen:
				u.adoptSpec(spec)
			case spec.Gen != u.spec.Gen:
				u.useSpec(spec)
			}
			if !u.spec.Singleton {
				return true
			}
			u.enterStandby(f)
		}
	}
}

// enterStandby writes the standby status: nothing runs, and why.
func (u *unit) enterStandby(f *Fence) {
	why := fenceWhy(f)
	prev := u.status()
	u.update(func(st *Status) {
		st.State, st.Process, st.Ready, st.NextRestart, st.Probe = Standby, Identity{}, false, time.Time{}, ""
		st.Gen, st.RestartGen, st.Hash = u.spec.Gen, u.spec.RestartGen, u.spec.Hash
		st.Message, st.NoFence, st.Holder = why, f == nil, ""
		if f != nil {
			st.Holder = f.Holder
		}
	})
	if prev.State != Standby || prev.Message != why {
		u.logf("%s: standby: %s", u.name, why)
	}
}

// fenceTicker ticks for a singleton's unit, to look at its fence; nil
// (never) for another's.
func (u *unit) fenceTicker() (<-chan time.Time, func()) {
	if !u.spec.Singleton {
		return nil, func() {}
	}
	t := time.NewTicker(fenceTick)
	return t.C, t.Stop
}

// stopFenced stops the running singleton whose fence f passed: its stop
// signal, then SIGKILL by the fence's KillBy (before another host can
// hold it), or at once without a fence of this boot.
func (u *unit) stopFenced(f *Fence) *Exit {
	timeout := u.spec.StopTimeout
	if f == nil || f.Boot != BootID() {
		timeout = 0
	} else if left := f.KillBy - BootTime(); left < timeout {
		timeout = max(left, 0)
	}
	why := fenceWhy(f)
	u.logf("%s: %s; stopping pid %d (SIGKILL within %s)", u.name, why, u.proc.PID, timeout.Round(time.Millisecond))
	e := u.stopProcessWithin(timeout)
	e.Reason, e.fenced = fmt.Sprintf("stopped at its fence: %s", why), true
	return e
}
