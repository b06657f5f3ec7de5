package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// ErrOutsideWindow: the revision waits for the host's deploy window; the
// host stays on the revision it is on, healing it.
var ErrOutsideWindow = errors.New("outside the host's deploy windows")

// WindowError says a revision waits for the host's next deploy window
// (errors.Is ErrOutsideWindow).
type WindowError struct {
	Revision string
	// Opens is when the next window opens.
	Opens time.Time
	// Which names the windows in fleet.yaml ("spec.hosts[0].windows").
	Which string
	// Override is how to let the revision in now, for the message.
	Override string
}

func (e *WindowError) Error() string {
	s := fmt.Sprintf("%s: %s waits for the window that opens at %s (fleet.yaml %s); the host stays on the revision it is on, healing it",
		ErrOutsideWindow, e.Revision, e.Opens.UTC().Format(time.RFC3339), e.Which)
	if e.Override != "" {
		s += "; " + e.Override + " " + e.Revision + " lets it in now"
	}
	return s
}

func (e *WindowError) Unwrap() error { return ErrOutsideWindow }

// Windows are a revision's deploy windows for this host, as its
// fleet.yaml gives them.
type Windows struct {
	Windows resource.Windows
	Which   string // where in fleet.yaml, for messages
}

// WindowGate is the deploy-window gate on new revisions: outside every
// window of its rule (or its rollout), a host does not adopt a new
// revision. It is asked before a fleet's slot, so a host outside its
// window takes no slot and blocks no one; the revision it is on is never
// asked about, so healing goes on.
type WindowGate struct {
	// For gives the windows of a revision (none: any time).
	For func(revision string) Windows
	// Overridden reports whether an operator let the revision in outside
	// its windows; nil: never.
	Overridden func(ctx context.Context, revision string) bool
	// Override is the command that lets a revision in (its argument is the
	// revision), for the message; "": none.
	Override string
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

var _ RevisionGate = WindowGate{}

// Admit lets rev in while a window is open, or when it was overridden.
func (g WindowGate) Admit(ctx context.Context, rev string) error {
	ws := g.For(rev)
	if len(ws.Windows) == 0 {
		return nil
	}
	now := time.Now()
	if g.Now != nil {
		now = g.Now()
	}
	open, next := ws.Windows.At(now)
	if open || g.Overridden != nil && g.Overridden(ctx, rev) {
		return nil
	}
	return &WindowError{Revision: rev, Opens: next, Which: ws.Which, Override: g.Override}
}

// Judged: a window has no say in a verdict.
func (WindowGate) Judged(string, state.Verdict, string) {}
