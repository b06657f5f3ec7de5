package diff

import "github.com/cortex-sync/cortex-sync/pkg/health"

// Observation is what a driver saw of one resource, or of one entry inside
// a mirrored tree: facts about the host against the desired state and the
// record, and no verdict. Decide is the one place that turns it into an
// action and a reason, so diff, sync and status always agree.
type Observation struct {
	// Desired is false when the resource left Git or is declared absent.
	Desired bool
	// Declared marks an absence declared in Git (ensure: absent), as
	// opposed to a resource that left Git.
	Declared bool
	// Recorded is true when cortex-sync applied it before.
	Recorded bool
	// Exists: something is in its place on the host (a process: it runs,
	// or it completed as its restart policy allows; a command: it ran).
	Exists bool
	// WrongType names what is there instead when it is not of the kind's
	// type ("directory" where a file belongs); empty when the type is right.
	WrongType string
	// Matches: the live content is the desired content (true where there
	// is no content to compare).
	Matches bool
	// Ours: the live object is what cortex-sync last wrote (the record's
	// fingerprint still holds).
	Ours bool
	// GitChanged: the desired state differs from what was last applied.
	GitChanged bool
	// SecretChanged: it does only because the content of a secretEnv file
	// changed on the host (a rotated secret), not in Git.
	SecretChanged bool
	// VarsChanged names the variables whose values alone changed the
	// desired state (substitute: true): the template is as last applied.
	VarsChanged []string `json:",omitempty"`
	// InputsChanged: its spec is as last applied, and what it restarts on
	// (restartOn) changed.
	InputsChanged bool
	// Attrs are the attributes in which the live object differs from the
	// desired one.
	Attrs []Attr
	// Crashed: a process that should run ended on the host.
	Crashed bool
	// Failed: the last attempt (a command's run) failed for this same spec.
	Failed bool
	// Held: an operator stopped it until told to start it again
	// (cortex-sync stop): it is Suspended, as if reconcile were disabled.
	Held bool
	// Unsupervised: a process runs, but its supervisor is gone. When it
	// runs the desired spec, a supervisor adopts it: no restart.
	Unsupervised bool
	// Live names the live object as observed (a file's stat), so that a
	// saved plan sees it moved; "" where there is none or the kind keeps
	// none. No verdict depends on it.
	Live string
	// Stale: the host is as desired but the record does not say all of it
	// (a tree index missing files found as desired, say, after a kill
	// between their write and the index's). No action: an apply of the
	// no-op refreshes the record.
	Stale bool
}

// Verbs say how a kind carries out a create and an update: a process is
// (re)started, a command is run.
type Verbs struct{ Create, Update Action }

// DefaultVerbs are create and update.
var DefaultVerbs = Verbs{Create: Create, Update: Update}

// Decide turns an observation into an action and a reason.
//
//	desired  exists  type  content/attrs        action  reason
//	no       no      -     -                    no-op
//	no       yes     -     -                    delete  declaredAbsent | removedFromGit
//	yes      no      -     -                    create  addedInGit | missingOnHost | crashed | changedInGit | secretChanged
//	yes      yes     bad   -                    update  addedInGit | driftedOnHost
//	yes      yes     ok    match, unsupervised  adopt   driftedOnHost
//	yes      yes     ok    match, no attrs      no-op
//	yes      yes     ok    differ               update  addedInGit | changedInGit | secretChanged | driftedOnHost | failedLastTime
//
// A change is changedInGit only when the host still holds what cortex-sync
// last wrote; anything else that differs was done on the host.
func Decide(o *Observation, v Verbs) (Action, Reason) {
	switch {
	case !o.Desired:
		if !o.Exists {
			return NoOp, NoReason
		}
		if o.Declared {
			return Delete, DeclaredAbsent
		}
		return Delete, RemovedFromGit
	case !o.Exists:
		switch {
		case !o.Recorded:
			return v.Create, AddedInGit
		case o.Crashed:
			return v.Update, Crashed
		case o.GitChanged:
			return v.Update, changed(o)
		}
		return v.Create, MissingOnHost
	case o.WrongType != "":
		if !o.Recorded {
			return v.Update, AddedInGit
		}
		return v.Update, Drifted
	case o.Matches && o.Unsupervised:
		return Adopt, Drifted
	case o.Matches && len(o.Attrs) == 0:
		return NoOp, NoReason
	case !o.Recorded:
		return v.Update, AddedInGit
	case o.Failed && !o.GitChanged:
		return v.Update, Retry
	case o.Ours && o.GitChanged:
		return v.Update, changed(o)
	}
	return v.Update, Drifted
}

// changed is why the desired state changed: in Git, or a secret on the
// host.
func changed(o *Observation) Reason {
	if o.SecretChanged {
		return SecretChanged
	}
	if len(o.VarsChanged) > 0 {
		return VarsChanged
	}
	return ChangedInGit
}

// decide sets the change's action and reason from what was observed; a
// tree whose entries change is updated for the weightiest of their reasons.
func (c *Change) decide(v Verbs) {
	c.Action, c.Reason = Decide(&c.Observed, v)
	c.Suspended = c.Observed.Held && c.Observed.Desired
	c.Attrs = append(c.Attrs, c.Observed.Attrs...)
	c.Drifted = 0
	for _, f := range c.Files {
		if f.Reason == Drifted || f.Reason == MissingOnHost {
			c.Drifted += max(1, f.Count)
		}
	}
	if c.Action == NoOp && len(c.Files) > 0 {
		c.Action, c.Reason = Update, treeReason(c.Files)
	}
	if c.Health == "" {
		c.Health = health.Healthy
		if c.Observed.Desired && !c.Observed.Exists {
			c.Health = health.Missing
		}
	}
}

// treeReason sums up why a tree changes: drift first, then Git, then a
// variable, then purge.
func treeReason(files []FileChange) Reason {
	best := Unmanaged
	for _, f := range files {
		switch f.Reason {
		case Drifted, MissingOnHost:
			return Drifted
		case Unmanaged:
		case VarsChanged:
			if best == Unmanaged {
				best = VarsChanged
			}
		default:
			best = ChangedInGit
		}
	}
	return best
}

// Status is a change's sync status: what status reports for it.
func (c *Change) Status() health.Sync {
	if c.Err != nil || c.Action != NoOp {
		return health.OutOfSync
	}
	return health.Synced
}
