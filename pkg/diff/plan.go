// Package diff computes the plan, desired state × last applied snapshot ×
// live host, as plain data, and renders it for people (text, markdown) and
// programs (JSON). Applying a plan is pkg/apply's business.
package diff

import (
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

// Action is what a sync does to one resource. It is a closed set.
type Action string

// The actions.
const (
	NoOp   Action = "no-op"
	Create Action = "create"
	Update Action = "update"
	Delete Action = "delete"
	// Forget drops the resource from the inventory and leaves it on the host
	// (removed from Git while annotated cortex-sync/prune: disabled).
	Forget Action = "forget"
	// Restart stops a process (if it runs) and starts it with its spec.
	Restart Action = "restart"
	// Run runs a command.
	Run Action = "run"
	// Adopt puts a process that runs as desired, but whose supervisor is
	// gone, back under a supervisor: nothing is stopped or started.
	Adopt Action = "adopt"
)

// Reason says why a change is due. Intentional changes (in Git) and
// corrective ones (drift on the host) are kept apart.
type Reason string

// The reasons.
const (
	NoReason       Reason = ""
	AddedInGit     Reason = "addedInGit"      // desired, never applied
	ChangedInGit   Reason = "changedInGit"    // desired differs from last applied
	Drifted        Reason = "driftedOnHost"   // live differs from last applied
	MissingOnHost  Reason = "missingOnHost"   // last applied, now gone from the host
	RemovedFromGit Reason = "removedFromGit"  // in the inventory, no longer desired
	DeclaredAbsent Reason = "declaredAbsent"  // ensure: absent
	Unmanaged      Reason = "unmanaged"       // an entry purge removes
	Crashed        Reason = "crashed"         // a process ended that should run
	Retry          Reason = "failedLastTime"  // a command that failed is tried again
	SecretChanged  Reason = "secretChanged"   // a secretEnv file's content changed on the host
	VarsChanged    Reason = "variableChanged" // a variable it is rendered with changed, not its template
)

// Phrase is the reason in words.
func (r Reason) Phrase() string {
	switch r {
	case AddedInGit:
		return "added in Git"
	case ChangedInGit:
		return "changed in Git"
	case Drifted:
		return "drifted on the host"
	case MissingOnHost:
		return "missing on the host"
	case RemovedFromGit:
		return "removed from Git"
	case DeclaredAbsent:
		return "ensure: absent"
	case Unmanaged:
		return "not in Git (purge)"
	case Crashed:
		return "crashed on the host"
	case Retry:
		return "failed last time"
	case SecretChanged:
		return "a secretEnv file changed on the host"
	case VarsChanged:
		return "a variable changed"
	}
	return "in sync"
}

// Plan is every change a sync would make, in dependency order.
type Plan struct {
	Source   state.Source
	Revision string
	Changes  []*Change
	// Prune says the plan is made for a sync with --prune, so a delete
	// owed to a resource leaving Git happens; without it such a resource
	// is kept. Display only: the sync's own policy decides.
	Prune bool
	// Warnings are what a sync of this plan would trip on, such as the
	// refusal sync --prune would meet; display only.
	Warnings []string
}

// Change is what a sync would do to one resource.
//
//	Action   Record (last applied)   Desired        on the host
//	create   nil or stale            the resource   absent, or taken over
//	update   any                     the resource   differs from desired
//	delete   any                     nil or absent  present
//	forget   the entry               nil            left alone
//	no-op    any                     the resource   matches
//
// Attrs, Content and Files are for display only; apply reads Action,
// Observed and the driver's Work.
type Change struct {
	ID     resource.ID
	Kind   string
	Path   string // the host path, for display
	Action Action
	Reason Reason
	// Prune marks a delete owed to the resource leaving Git: it runs only
	// with --prune.
	Prune bool
	// Suspended marks a resource annotated cortex-sync/reconcile: disabled:
	// Action is what would be done, and nothing is.
	Suspended bool
	// Err is why the resource could not be planned.
	Err error
	// Health is what the observation found, and Detail says more about the
	// live state ("killed by SIGKILL, 3 restarts"); both display only.
	Health health.Status
	Detail string

	Runtime *Runtime     // display only: a process's or command's last run
	Attrs   []Attr       // display only
	Content *Content     // display only
	Files   []FileChange // display only: changes inside a tree
	Drifted int          // display only: files inside a tree that drifted

	// Observed is what the driver saw; Action and Reason are decided
	// from it (Decide).
	Observed Observation

	Desired *resource.Resource
	Record  *state.Entry
	Work    any // driver-private planned work
}

// Runtime is what a process or command did on the host, for status.
type Runtime struct {
	PID      int    `json:"pid,omitempty"`
	State    string `json:"state,omitempty"` // the supervisor's state (running, backoff, exited)
	Restarts int    `json:"restarts"`
	// QuickExits counts a process's quick failures in a row, or a
	// command's failed runs in a row.
	QuickExits int        `json:"quickExits,omitempty"`
	LastExit   *Exit      `json:"lastExit,omitempty"`
	LastRun    *time.Time `json:"lastRun,omitempty"` // a command's last run
	Outcome    string     `json:"outcome,omitempty"` // how it ended, in words ("exit code 3", "timed out after 2s")
	// NextAttempt is when a process in backoff starts again, or a failed
	// command may run again.
	NextAttempt *time.Time `json:"nextAttempt,omitempty"`
	// Containment is what holds a process's tree: its cgroup, or its
	// process group where no cgroup can be made.
	Containment string `json:"containment,omitempty"`
	LogPath     string `json:"logPath,omitempty"`
	// LastOutput is the end of the output of a Degraded process or
	// command.
	LastOutput []string `json:"lastOutput,omitempty"`
}

// Exit is how a run ended.
type Exit struct {
	Code   int       `json:"code"`             // -1 when killed by a signal or never started
	Signal string    `json:"signal,omitempty"` // the signal that ended it
	Reason string    `json:"reason,omitempty"`
	Time   time.Time `json:"time"`
}

// Attr is an attribute that changes.
type Attr struct {
	Field  string `json:"field"`
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
}

// Content is how content changes: a unified diff, or a summary when the
// content is binary, large or sensitive.
type Content struct {
	Diff    string `json:"diff,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// FileChange is one file inside a tree that changes.
type FileChange struct {
	Path   string `json:"path"`
	Action Action `json:"action"`
	Reason Reason `json:"reason"`
	// Backup: what is there is not what cortex-sync wrote, and is copied
	// to the backups before it is replaced or deleted.
	Backup bool `json:"backup,omitempty"`
	// Count, when above one, stands for that many changes of this action
	// and reason, not listed one by one (Path is empty): a plan made only
	// to be applied counts a large tree's changes.
	Count int `json:"count,omitempty"`
}

// FileCount counts the changes inside a tree.
func (c *Change) FileCount() int {
	n := 0
	for _, f := range c.Files {
		n += max(1, f.Count)
	}
	return n
}

// errText is an error's message, "" for none: for the JSON rendering.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// backupNote says that a file is backed up first, for the renderings.
func (f FileChange) backupNote() string {
	if f.Backup {
		return ", backed up first: changed on the host"
	}
	return ""
}

// Backups counts the files inside a tree that are backed up first.
func (c *Change) Backups() int {
	n := 0
	for _, f := range c.Files {
		if f.Backup {
			n += max(1, f.Count)
		}
	}
	return n
}

// Pending reports whether the change would do anything: what sync acts on
// and what diff --exit-code counts.
func (c *Change) Pending() bool {
	return c.Err == nil && !c.Suspended && c.Action != NoOp
}

// IsDrift reports whether the change corrects the host rather than follows Git.
func (c *Change) IsDrift() bool {
	return c.Reason == Drifted || c.Reason == MissingOnHost || c.Reason == Crashed || c.Drifted > 0
}

// Summary counts a plan's changes.
type Summary struct {
	Create  int `json:"create"`
	Update  int `json:"update"`
	Delete  int `json:"delete"`
	Forget  int `json:"forget"`
	Restart int `json:"restart"`
	Run     int `json:"run"`
	Adopt   int `json:"adopt"`
	NoOp    int `json:"noOp"`
	Drifted int `json:"drifted"`
	Errors  int `json:"errors"`
	// kept counts, among Delete, the deletes owed to leaving Git in a
	// plan not made for --prune: they do not happen. For the phrase.
	kept int
}

// Summary counts the plan's changes by action.
func (p *Plan) Summary() Summary {
	var s Summary
	for _, c := range p.Changes {
		switch {
		case c.Err != nil:
			s.Errors++
			continue
		case !c.Pending():
			s.NoOp++
			continue
		case c.Action == Create:
			s.Create++
		case c.Action == Update:
			s.Update++
		case c.Action == Delete:
			s.Delete++
			if c.Prune && !p.Prune {
				s.kept++
			}
		case c.Action == Forget:
			s.Forget++
		case c.Action == Restart:
			s.Restart++
		case c.Action == Run:
			s.Run++
		case c.Action == Adopt:
			s.Adopt++
		}
		if c.IsDrift() {
			s.Drifted++
		}
	}
	return s
}

// HasChanges reports whether a sync would change anything.
func (p *Plan) HasChanges() bool {
	for _, c := range p.Changes {
		if c.Pending() {
			return true
		}
	}
	return false
}

// Errors lists the changes that could not be planned.
func (p *Plan) Errors() []*Change {
	var out []*Change
	for _, c := range p.Changes {
		if c.Err != nil {
			out = append(out, c)
		}
	}
	return out
}

// Why is the reason in words, naming the variables of a variableChanged.
func (c *Change) Why() string {
	if names := c.variables(); len(names) > 0 {
		word := "variable"
		if len(names) > 1 {
			word = "variables"
		}
		return word + " " + strings.Join(names, ", ") + " changed"
	}
	return c.Reason.Phrase()
}

// variables are the variables whose change is the change's reason.
func (c *Change) variables() []string {
	if c.Reason != VarsChanged {
		return nil
	}
	return c.Observed.VarsChanged
}
