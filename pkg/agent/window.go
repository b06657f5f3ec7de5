package agent

import (
	"context"
	"errors"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// Deploy windows (fleet.yaml windows:, on a rule or on the rollout): a
// host adopts a new revision only while one of its windows is open. The
// gate (reconcile.WindowGate) is the first asked, before the fleet's
// slot: a host outside its window asks for no slot, so it holds none and
// blocks no one. The revision the host is on is never gated: it heals it.
// Without a coordinator, a rule's windows gate the host all the same
// (a rollout's do not: a rollout gates nothing without one).

// WindowOverrider is a Coordinator that can let a revision in outside
// the host's windows (cortex-sync fleet rollout override-window REV).
type WindowOverrider interface {
	WindowOverridden(ctx context.Context, revision string) bool
}

// OverrideWindowCommand lets a revision in outside its windows, for
// messages.
const OverrideWindowCommand = "cortex-sync fleet rollout override-window"

// windowGate is the agent's deploy-window gate.
func (a *Agent) windowGate() reconcile.WindowGate {
	g := reconcile.WindowGate{For: a.windowsOf, Now: a.opts.WindowClock}
	if o, ok := a.opts.Fleet.(WindowOverrider); ok {
		g.Overridden, g.Override = o.WindowOverridden, OverrideWindowCommand
	}
	return g
}

// noteWindows keeps the deploy windows d's fleet.yaml gives this host.
func (a *Agent) noteWindows(d *reconcile.Desired) {
	var w reconcile.Windows
	if fl, err := resource.ReadFleet(d.Checkout.Tree); err == nil && fl != nil {
		w.Windows, w.Which = fl.WindowsFor(a.opts.Engine.Host, a.opts.Fleet != nil)
	}
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	if a.revs.windows == nil {
		a.revs.windows = map[string]reconcile.Windows{}
	}
	a.revs.windows[d.Revision()] = w
	for rev := range a.revs.windows {
		if len(a.revs.windows) > 8 && rev != d.Revision() {
			delete(a.revs.windows, rev) // only the newest is ever offered
		}
	}
}

// windowsOf are the windows rev waits for: none on a host that runs no
// revision yet (a host being set up takes its first at once).
func (a *Agent) windowsOf(rev string) reconcile.Windows {
	if a.sess.View().Revision == "" {
		return reconcile.Windows{}
	}
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	return a.revs.windows[rev]
}

// waitWindow notes why the newest revision is held: when it waits for a
// window, the host says so (status, its fleet status) and fetches again
// when the window opens; any other answer ends the wait.
func (a *Agent) waitWindow(why error) {
	var we *reconcile.WindowError
	if !errors.As(why, &we) {
		we = nil
	}
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	old := a.revs.windowWait
	a.revs.windowWait = we
	if we == nil || old != nil && old.Opens.Equal(we.Opens) && old.Revision == we.Revision {
		return
	}
	if a.revs.windowTimer != nil {
		a.revs.windowTimer.Stop()
	}
	if a.opts.WindowClock == nil && !we.Opens.IsZero() { // another clock: the poll looks again
		a.revs.windowTimer = time.AfterFunc(time.Until(we.Opens)+time.Second, func() { a.Reconcile(TriggerRevision) })
	}
}

// windowOpens is when the window the newest revision waits for opens;
// zero when it waits for none.
func (a *Agent) windowOpens() time.Time {
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	if a.revs.windowWait == nil {
		return time.Time{}
	}
	return a.revs.windowWait.Opens
}

func (a *Agent) stopWindowTimer() {
	a.revs.mu.Lock()
	defer a.revs.mu.Unlock()
	if a.revs.windowTimer != nil {
		a.revs.windowTimer.Stop()
	}
}
