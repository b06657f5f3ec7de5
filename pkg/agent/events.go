package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/source"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// The agent tells what it decides as events (pkg/events), written once
// where the decision is made: to Options.Events (notifications; nil is
// events.Discard) and to the local event log of the state dir
// (cortex-sync events, /api/v1/events).
// A message names what and why from what status shows, which holds no
// secret.

// tell completes e (time, host) and emits it to every sink. It never
// blocks for long: each sink queues, dropping when full.
func (a *Agent) tell(e events.Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if e.Host == "" {
		e.Host = a.hostName()
	}
	a.opts.Events.Emit(e)
	if l := a.eventLog.Load(); l != nil {
		l.Emit(e)
	}
}

// hostName is the host's name in events: the fleet's name for it, or the
// system's.
func (a *Agent) hostName() string {
	if n := a.opts.Engine.Host.Name; n != "" {
		return n
	}
	return systemHost()
}

var systemHost = sync.OnceValue(func() string {
	n, _ := os.Hostname()
	return n
})

// Conditions a warning or an error raises and a later info event clears.
const (
	condSource      = "source"
	condRevision    = "revision"
	condCoordinator = "coordinator"
	condRollout     = "rollout"
)

func condResource(id string) string { return "resource:" + id }
func condFight(id string) string    { return "fight:" + id }

// appliedYet tells, once a revision, that it converged in full.
func (a *Agent) appliedYet(rev string) {
	if rev == "" {
		return
	}
	a.revs.mu.Lock()
	told := a.revs.applied == rev
	a.revs.applied = rev
	a.revs.mu.Unlock()
	if told {
		return
	}
	e := events.Event{Severity: events.Info, Reason: events.RevisionApplied, Revision: rev, Condition: condRevision, Message: "applied in full"}
	view := a.sess.View()
	switch {
	case view.Pin != nil && view.Pin.Revision == rev:
		// Rolled back to: what raised "revision" still holds.
		e.Condition, e.Message = "", "applied in full: a rollback holds the host on it while the source's head is "+view.Pin.Head
	case view.Trial() != nil && view.Trial().Revision == rev:
		e.Message += "; on trial"
	}
	a.tell(e)
}

// fightStarted tells, once a fight, that id is fighting.
func (a *Agent) fightStarted(id resource.ID, f Fight) {
	a.fights.Lock()
	defer a.fights.Unlock()
	if a.fights.on == nil {
		a.fights.on = map[resource.ID]bool{}
	}
	if a.fights.on[id] {
		return
	}
	a.fights.on[id] = true
	a.tell(events.Event{Severity: events.Warning, Reason: events.FightStarted, Resource: string(id), Condition: condFight(string(id)),
		Message: fmt.Sprintf("%s: something keeps undoing it (%d corrections within the fight window); corrected once left alone for %s", id, f.Corrections, a.opts.FightSettle)})
}

// fightsEnded tells of each fight told that is over: the resource is not
// fighting any more (few corrections within the window), or it left Git.
func (a *Agent) fightsEnded() {
	a.fights.Lock()
	defer a.fights.Unlock()
	for id := range a.fights.on {
		if a.fight.Status(string(id)).Fighting {
			continue
		}
		delete(a.fights.on, id)
		a.tell(events.Event{Severity: events.Info, Reason: events.FightEnded, Resource: string(id), Condition: condFight(string(id)),
			Message: string(id) + ": left alone; no longer fighting"})
	}
}

// failingResource is the resource a judgement names, if it names one
// ("Process/web", not "check ssh").
func failingResource(j reconcile.Judgement) string {
	if strings.Contains(j.Failing, "/") && !strings.Contains(j.Failing, " ") {
		return j.Failing
	}
	return ""
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// fightsEvery is how often fights told are looked at for their end.
const fightsEvery = time.Second

// watchFights tells of fights that ended, until ctx ends.
func (a *Agent) watchFights(ctx context.Context) {
	tick := time.NewTicker(fightsEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.fightsEnded()
		}
	}
}

// openEventLog opens the state dir's event log for Run.
func (a *Agent) openEventLog() error {
	l, err := events.OpenLog(a.sess.State, events.LogOptions{
		Dropped: a.opts.Metrics.eventsDropped.Inc,
		Failed:  func(err error) { a.log.Warn("event log write failed; the event is lost", "error", err) },
	})
	if err != nil {
		return fmt.Errorf("open the event log in the state dir: %w", err)
	}
	a.eventLog.Store(l)
	return nil
}

// closeEventLog writes what is queued and closes the event log.
func (a *Agent) closeEventLog() {
	if l := a.eventLog.Swap(nil); l != nil {
		if err := l.Close(); err != nil {
			a.log.Warn("close the event log", "error", err)
		}
	}
}

// Events calls each for every event of the state dir's log at or after
// since, oldest first; with follow it then waits for more until ctx ends
// (/api/v1/events).
func (a *Agent) Events(ctx context.Context, since time.Time, follow bool, each func(events.Event) error) error {
	s := a.session()
	if s == nil {
		return errors.New("the agent is starting: no event log yet")
	}
	poll := time.Duration(0)
	if follow {
		poll = followPoll
	}
	return events.Follow(ctx, s.State, since, poll, each)
}

// followPoll is how often a follower of the event log looks for more.
const followPoll = 100 * time.Millisecond

// events serves GET /api/v1/events: the local event log as JSON lines
// (application/x-ndjson), one event a line, oldest first. ?since= is a
// duration back from now or a time; ?follow=1 keeps the response open and
// writes (and flushes) each new event as it is told, until the client
// goes or the agent stops.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if s.opts.Events == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "no events here"})
		return
	}
	q := r.URL.Query()
	since, err := events.ParseSince(q.Get("since"), time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	follow := false
	if v := q.Get("follow"); v != "" {
		if follow, err = strconv.ParseBool(v); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "follow=" + v + ": want 1 or 0"})
			return
		}
	}
	rc := http.NewResponseController(w)
	if follow {
		rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's write timeout
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc.Flush() // a follower knows at once it is connected
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.streams, cancel)()
	enc := json.NewEncoder(w)
	err = s.opts.Events(ctx, since, follow, func(e events.Event) error {
		if err := enc.Encode(e); err != nil {
			return err
		}
		if follow {
			return rc.Flush()
		}
		return nil
	})
	if err != nil && r.Context().Err() == nil {
		s.log.Warn("events request ended", "error", err)
	}
}

// restartedOnItsOwn tells of n restarts a supervisor made on its own: a
// crash, or a kill for a failing liveness probe. Called with the
// watcher's mu held.
func (w *watcher) restartedOnItsOwn(id resource.ID, st *supervise.Status, n int) {
	if w.tell == nil {
		return
	}
	e := events.Event{Severity: events.Warning, Reason: events.ProcessRestarted, Resource: string(id)}
	what := "it " + st.LastExit.String()
	if st.LastExit != nil && st.LastExit.Liveness {
		e.Reason, what = events.ProcessKilled, "killed for failing its liveness probe"
		if st.LastExit.Reason != "" {
			what += ": " + st.LastExit.Reason
		}
	}
	times := ""
	if n > 1 {
		times = fmt.Sprintf(" (%d times since last seen)", n)
	}
	e.Message = fmt.Sprintf("%s: %s; started again by its supervisor%s, %d restarts in all", id, what, times, st.Restarts)
	w.tell(e)
}

// changed tells of a process's state that its supervisor changed from
// was: failed (given up on), or running again after it failed (by way of
// starting). Called with the watcher's mu held.
func (w *watcher) changed(id resource.ID, was supervise.State, st *supervise.Status) {
	if w.tell == nil || was == st.State {
		return
	}
	switch {
	case st.State == supervise.Failed:
		w.failed[id] = true
		why := st.StartError
		if why == "" && st.LastExit != nil {
			why = "it " + st.LastExit.String()
			if st.QuickExits > 0 {
				why += fmt.Sprintf(", %d quick failures in a row", st.QuickExits)
			}
		}
		w.tell(events.Event{Severity: events.Error, Reason: events.ProcessFailed, Resource: string(id), Condition: condResource(string(id)),
			Message: fmt.Sprintf("%s failed: %s; its supervisor gave up (cortex-sync restart %s, or a new revision, starts it again)", id, why, id)})
	case w.failed[id] && st.State == supervise.Running:
		delete(w.failed, id)
		w.tell(events.Event{Severity: events.Info, Reason: events.ProcessRunning, Resource: string(id), Condition: condResource(string(id)),
			Message: string(id) + " runs again"})
	}
}

// toldGate is the coordinator as a revision gate, telling what its rollout
// decides for this host: a slot taken, the rollout paused.
type toldGate struct {
	Coordinator
	a *Agent
}

// pauser is an error of a rollout that is paused (fleetagent.WaitError).
type pauser interface{ RolloutPaused() bool }

func (g toldGate) Admit(ctx context.Context, rev string) error {
	err := g.Coordinator.Admit(ctx, rev)
	a := g.a
	a.revs.mu.Lock()
	gated := a.revs.gated == rev
	var p pauser
	paused := err != nil && errors.As(err, &p) && p.RolloutPaused()
	tellPause := paused && a.revs.paused != err.Error()
	if paused {
		a.revs.paused = err.Error()
	} else if err == nil {
		a.revs.paused = ""
	}
	a.revs.mu.Unlock()
	switch {
	case err == nil && gated:
		a.tell(events.Event{Severity: events.Info, Reason: events.RolloutSlotTaken, Revision: rev, Condition: condRollout,
			Message: "rollout slot taken: applying " + rev})
	case tellPause:
		a.tell(events.Event{Severity: events.Warning, Reason: events.RolloutPaused, Revision: rev, Condition: condRollout,
			Message: err.Error() + "; the host stays on the revision it is on"})
	}
	return err
}

// coordinatorSaid tells when the host's coordinator stops answering, and
// when it answers again. A host not in its fleet yet (no fleet.yaml
// fetched) has lost nothing.
func (a *Agent) coordinatorSaid(info reconcile.FleetReport) {
	lost := ""
	if info.Fleet != "" {
		lost = info.Coordinator
	}
	a.revs.mu.Lock()
	was := a.revs.lost
	a.revs.lost = lost
	a.revs.mu.Unlock()
	switch {
	case was == "" && lost != "":
		a.tell(events.Event{Severity: events.Warning, Reason: events.CoordinatorLost, Condition: condCoordinator,
			Message: "the fleet's coordinator does not answer: " + lost + "; the host keeps its revision and keeps healing"})
	case was != "" && lost == "":
		a.tell(events.Event{Severity: events.Info, Reason: events.CoordinatorBack, Condition: condCoordinator,
			Message: "the fleet's coordinator answers again"})
	}
}

// sourceFailing is the event of err, a failed fetch, when it is the first
// of a run of failures (none when err refuses a revision: that is told
// RevisionRefused). Called with revs.mu held, before refuse keeps err.
func (a *Agent) sourceFailing(err error) []events.Event {
	var me *reconcile.ManifestError
	var ue *source.UntrustedError
	if a.revs.fetchErr != nil || errors.As(err, &me) || errors.As(err, &ue) {
		return nil
	}
	return []events.Event{{Severity: events.Warning, Reason: events.SourceFailing, Condition: condSource,
		Message: "fetch failed; the host stays on the revision it has: " + err.Error()}}
}

// sourceRecovered tells that rev was fetched after fetches failed. Called
// on the poll loop (which alone sets fetchErr) before a fetch clears it.
func (a *Agent) sourceRecovered(rev string) {
	a.revs.mu.Lock()
	failing := a.revs.fetchErr != nil
	a.revs.mu.Unlock()
	if failing {
		a.tell(events.Event{Severity: events.Info, Reason: events.SourceRecovered, Revision: rev, Condition: condSource,
			Message: "the source answers again: fetched " + rev})
	}
}
