package reconcile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// AgentReport is what a running agent knows beyond the snapshot: why it
// refuses a revision, whether it is suspended, what it holds back and what
// it fights. The agent writes it to its state dir (agent.json) as it
// changes; status, run by hand, reads it there, so the two tell one truth.
type AgentReport struct {
	Agent   supervise.Identity `json:"agent"` // the agent that wrote it
	Since   time.Time          `json:"since"` // when that agent started
	Written time.Time          `json:"written"`
	// Address is where the agent's API listens (host:port): where
	// commands run on this state dir reach it.
	Address string `json:"address,omitempty"`
	// TokenFile is the file holding the bearer token the agent's control
	// requests need (its path, never the token): where commands run on
	// this state dir find it.
	TokenFile string `json:"tokenFile,omitempty"`
	// Own are the files the agent takes its settings and trust from (its
	// config, token, keys): every command run on this state dir reserves
	// them too, so that no manifest a sync applies by hand rewrites them.
	Own []Own `json:"own,omitempty"`
	// Revision is the revision the agent converges to.
	Revision  string `json:"revision,omitempty"`
	Suspended bool   `json:"suspended,omitempty"`
	// Refused is the source's newest revision, when it does not validate:
	// the host stays on Revision.
	Refused *Refusal `json:"refused,omitempty"`
	// HeldBack is the source's newest revision when it is not applied: it
	// was refused after a rollback, a rollback holds the host, or a gate
	// (a fleet's rollout) keeps it out for now.
	HeldBack *Refusal `json:"heldBack,omitempty"`
	// SourceError is why the last fetch failed.
	SourceError string `json:"sourceError,omitempty"`
	// PruneHold is why no prune runs for this revision.
	PruneHold string `json:"pruneHold,omitempty"`
	// Fighting are the resources something keeps undoing.
	Fighting []Fight `json:"fighting,omitempty"`
	// Held are the resources the engine holds back, and why.
	Held []Held `json:"held,omitempty"`
	// Unobserved are the resources the last drift scan could not observe.
	Unobserved []Held `json:"unobserved,omitempty"`
	// Fleet is the host's part in a fleet; nil when it is in none.
	Fleet *FleetReport `json:"fleet,omitempty"`
	// Watches are the directories the agent watches for drift; nil
	// before it watches any.
	Watches *WatchReport `json:"watches,omitempty"`
}

// WatchReport is how many directories the agent watches for drift, and
// how many it cannot for want of inotify watches
// (fs.inotify.max_user_watches): those wait for the drift scan, and their
// watches are retried.
type WatchReport struct {
	Directories int `json:"directories"` // watched
	Unwatched   int `json:"unwatched,omitempty"`
	// Since is when directories began to go unwatched; Error, the
	// kernel's refusal.
	Since time.Time `json:"since,omitzero"`
	Error string    `json:"error,omitempty"`
	// Condition says it in a sentence, with what to do; empty when every
	// directory is watched.
	Condition string `json:"condition,omitempty"`
}

// FleetReport is a host's part in its fleet.
type FleetReport struct {
	Fleet string `json:"fleet"` // "" until it is known (fleet.yaml's name)
	Host  string `json:"host"`
	// Coordinator says since when etcd has not answered, and why; empty
	// while it answers.
	Coordinator string `json:"coordinator,omitempty"`
	// Slow says since when etcd has answered late (the connection up);
	// empty while it answers in time or is unreachable.
	Slow string `json:"slow,omitempty"`
	// Singletons are the singletons of the host's desired set, and who
	// holds each ("" while unknown).
	Singletons map[string]string `json:"singletons,omitempty"`
	// Ignored are the records of the fleet's keys this host last read and
	// ignored ("KEY: why"): any member can write any key.
	Ignored []string `json:"ignored,omitempty"`
}

// Refusal is a revision refused, and why.
type Refusal struct {
	Revision string    `json:"revision"`
	Error    string    `json:"error"`
	Since    time.Time `json:"since"`
	// Reason is why a revision is refused: "signature" (its commits fail
	// verification) or "manifests" (they do not validate); or, held back,
	// "window" (it waits for the host's deploy window).
	Reason string `json:"reason,omitempty"`
	// For a signature: the commit (or tag) refused and its signer
	// ("unsigned", an SSH key's fingerprint and principals, a PGP key ID).
	Commit string `json:"commit,omitempty"`
	Signer string `json:"signer,omitempty"`
	Why    string `json:"why,omitempty"`
	// WindowOpens is when the deploy window a revision held back waits
	// for opens (Reason "window").
	WindowOpens time.Time `json:"windowOpens,omitzero"`
}

// ReasonWindow is the Reason of a revision held back until the host's
// deploy window opens.
const ReasonWindow = "window"

// Summary says the refusal in a line for a table (a fleet's host): for a
// signature, the commit, its signer and why come first, before any
// source's URL.
func (r *Refusal) Summary() string {
	switch {
	case r.Reason != "signature" || r.Commit == "":
		return "revision " + r.Revision + " refused: " + r.Error
	case r.Signer == "unsigned":
		return "revision " + r.Revision + " refused for its signature: " + r.Commit + " is not signed: " + r.Why
	case r.Signer == "":
		return "revision " + r.Revision + " refused for its signature: " + r.Commit + ": " + r.Why
	}
	return "revision " + r.Revision + " refused for its signature: " + r.Commit + " is signed by " + r.Signer + ": " + r.Why
}

// Fight is a resource something keeps undoing.
type Fight struct {
	ID          string `json:"id"`
	Corrections int    `json:"corrections"` // within the fight window
	// NotBefore is when it may be corrected next: once left alone for
	// the settle time.
	NotBefore time.Time `json:"notBefore,omitzero"`
}

// Held is a resource held back (waiting, blocked, refused) or unobserved,
// and why.
type Held struct {
	ID string `json:"id"`
	// Verdict: waiting, blocked, refused, kept (left Git, no prune), or
	// notCorrected (the agent is suspended, or the resource disabled).
	Verdict string    `json:"verdict,omitempty"`
	Reason  string    `json:"reason"`
	Until   time.Time `json:"until,omitzero"`
}

const agentReportFile = "agent.json"

// WriteAgentReport saves r in the state dir (0600, atomically).
func WriteAgentReport(d state.Dir, r *AgentReport) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	h, err := d.Open(true)
	if err != nil {
		return err
	}
	defer h.Close()
	// Not a state-dir temp (a lock taker removes those): the agent writes
	// this without the state lock.
	tmp := fmt.Sprintf("%s.%d", agentReportFile, os.Getpid())
	f, err := h.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = h.Rename(tmp, agentReportFile)
	}
	if err != nil {
		h.Remove(tmp)
	}
	return err
}

// RemoveAgentReport removes the report of an agent that stops.
func RemoveAgentReport(d state.Dir) error {
	err := d.Remove(agentReportFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// ReadAgentReport is the report of the agent running on the state dir; nil
// when none runs (a report whose agent is gone is not read).
func ReadAgentReport(d state.Dir) *AgentReport {
	b, err := d.ReadFile(agentReportFile)
	if err != nil {
		return nil
	}
	var r AgentReport
	if json.Unmarshal(b, &r) != nil || !r.Agent.Alive() {
		return nil
	}
	return &r
}
