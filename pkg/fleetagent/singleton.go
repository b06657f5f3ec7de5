package fleetagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/state"
	"github.com/cortex-sync/cortex-sync/pkg/supervise"
)

// Singletons: for each singleton of the desired set the host campaigns in
// etcd; while it holds one it writes the singleton's fence on every
// renewal of the lease, so the supervisor runs the process until the
// fence passes. A host that does not hold it writes a fence that says who
// does, and the supervisor keeps the process in standby.

// fenceEvery is how often a holder looks for a renewal that moved its
// deadline, to write the fence anew.
const fenceEvery = 100 * time.Millisecond

// holderEvery is how often a host that waits for a singleton reads who
// holds it, for its status.
const holderEvery = 2 * time.Second

// single is one singleton this host campaigns for.
type single struct {
	l      *Link
	name   string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	why    string // why it stops: set by stop
	holder string // who holds it, as last seen
}

// Singletons campaigns for each of names and gives up those no longer in
// the desired set (they stop first).
func (l *Link) Singletons(names []string) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	l.singletonMu.Lock()
	var gone []*single
	for n, s := range l.singles {
		if !want[n] {
			gone = append(gone, s)
			delete(l.singles, n)
		}
	}
	for n := range want {
		if _, ok := l.singles[n]; ok || l.ctx.Err() != nil {
			continue
		}
		ctx, cancel := context.WithCancel(l.ctx)
		s := &single{l: l, name: n, cancel: cancel, done: make(chan struct{})}
		l.singles[n] = s
		go s.run(ctx)
	}
	l.singletonMu.Unlock()
	for _, s := range gone {
		s.stop("no longer in this host's desired set")
		go func() {
			s.wait(context.Background())
			state.At(l.opts.StateDir).Remove(supervise.FenceFile(s.name))
		}()
	}
}

func (s *single) holderName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder
}

func (s *single) setHolder(h string) {
	s.mu.Lock()
	s.holder = h
	s.mu.Unlock()
}

// stop ends the campaign; a held singleton is stopped, then given up.
func (s *single) stop(why string) {
	s.mu.Lock()
	if s.why == "" {
		s.why = why
	}
	s.mu.Unlock()
	s.cancel()
}

// wait waits until the singleton was given up (or ctx ends).
func (s *single) wait(ctx context.Context) {
	select {
	case <-s.done:
	case <-ctx.Done():
	}
}

func (s *single) stopWhy() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why
}

// run campaigns until stopped: holds the singleton while it can, and
// campaigns again when it lost it.
func (s *single) run(ctx context.Context) {
	defer close(s.done)
	l := s.l
	me := l.opts.Host.Name
	defer func() {
		if why := s.stopWhy(); why != "" {
			s.standby(s.holderName(), why)
		}
	}()
	if err := l.outlives(); err != nil {
		s.standby("", "this host cannot run singletons: "+err.Error())
		l.log.Error("singletons cannot run here: the supervisor cannot outlive the agent, so a fence would not hold", "singleton", s.name, "error", err)
		<-ctx.Done()
		return
	}
	for ctx.Err() == nil {
		m := l.getMember()
		if m == nil {
			s.standby("", "not in a fleet yet: "+errString(l.joinError()))
			wait(ctx, time.Second)
			continue
		}
		cctx, ccancel := context.WithCancel(ctx)
		watching := make(chan struct{})
		go func() { // while it waits: who holds it, for the status
			defer close(watching)
			for {
				holder, err := m.SingletonHolder(cctx, s.name)
				switch {
				case cctx.Err() != nil:
					return
				case err != nil:
					s.setHolder("")
					s.standby("", errString(err)+"; no copy runs here")
				case holder != "" && holder != me:
					s.setHolder(holder)
					s.standby(holder, "runs on "+holder+", which holds the singleton")
				default:
					s.standby(holder, "campaigning for the singleton")
				}
				if !wait(cctx, holderEvery) {
					return
				}
			}
		}()
		h, err := m.Campaign(cctx, s.name, me, l.opts.SingletonTTL)
		ccancel()
		<-watching
		if err != nil {
			if ctx.Err() == nil {
				s.setHolder("")
				s.standby("", errString(err))
				wait(ctx, time.Second)
			}
			continue
		}
		s.setHolder(me)
		l.log.Info("singleton held: it runs on this host", "singleton", s.name)
		s.hold(ctx, h)
	}
}

// hold keeps the fence of h renewed until h ends (its deadline passed: it
// campaigns again) or ctx does (it stops the process, then gives the
// singleton up).
func (s *single) hold(ctx context.Context, h *fleet.Holder) {
	l := s.l
	last := h.Deadline()
	s.fence(h, last)
	t := time.NewTicker(fenceEvery)
	defer t.Stop()
	for {
		select {
		case <-h.Done():
			why := "lost the singleton: " + errString(h.Err())
			s.setHolder("")
			s.standby("", why)
			l.log.Warn("singleton lost: stopped at its fence; campaigning again", "singleton", s.name, "why", errString(h.Err()))
			// Its lease is renewed no more, and revoked if etcd answers:
			// an etcd that comes back must not keep it for a holder gone.
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			h.Resign(rctx)
			cancel()
			return
		case <-ctx.Done():
			why := s.stopWhy()
			s.standby(l.opts.Host.Name, why)
			s.waitStopped(last + h.TTL()/4)
			rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := h.Resign(rctx)
			cancel()
			s.setHolder("")
			l.log.Info("singleton given up: stopped here, and another host may take it now", "singleton", s.name, "why", why, "resign_error", errString(err))
			return
		case <-t.C:
			if d := h.Deadline(); d != last {
				last = d
				s.fence(h, d)
			}
		}
	}
}

// waitStopped waits until the singleton's process runs no more, up to
// killBy on CLOCK_BOOTTIME (and a second): its lease is revoked only then.
func (s *single) waitStopped(killBy time.Duration) {
	for supervise.BootTime() < killBy+time.Second {
		st, err := supervise.Read(s.l.opts.StateDir, s.name)
		if err != nil || st == nil || !st.Process.Alive() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fence writes the holder's fence: the process may run until deadline,
// and is gone by TTL/4 after, before the lease can expire (TTL/2 after
// the deadline at the soonest).
func (s *single) fence(h *fleet.Holder, deadline time.Duration) {
	s.write(supervise.Fence{Boot: supervise.BootID(), Deadline: deadline, KillBy: deadline + h.TTL()/4, Holder: s.l.opts.Host.Name})
}

// standby writes a fence that lets nothing run here, saying why.
func (s *single) standby(holder, note string) {
	s.write(supervise.Fence{Boot: supervise.BootID(), Holder: holder, Note: note})
}

// write replaces the fence file (0600, atomically, through the state
// dir's door to the host), unless it says the same already.
func (s *single) write(f supervise.Fence) {
	dir := state.At(s.l.opts.StateDir)
	name := supervise.FenceFile(s.name)
	b, err := json.Marshal(f)
	if err == nil {
		if old, rerr := dir.ReadFile(name); rerr == nil && string(old) == string(b) {
			return
		}
		err = writeFile(dir, name, b)
	}
	if err != nil {
		s.l.log.Error("write a singleton's fence", "singleton", s.name, "file", dir.Sub(name).Path(), "error", err)
	}
}

func writeFile(dir state.Dir, name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dir.Rename(tmp, name)
	}
	if err != nil {
		dir.Remove(tmp)
	}
	return err
}

// outlives makes the supervisor one that outlives the agent, once.
func (l *Link) outlives() error {
	l.outlive.Do(func() {
		if l.opts.Outlive != nil {
			if err := l.opts.Outlive(); err != nil {
				l.outliveErr = fmt.Errorf("hand the processes over to a supervisor that outlives the agent: %w", err)
			}
		}
	})
	return l.outliveErr
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	var ue *fleet.UnreachableError
	if errors.As(err, &ue) {
		return ue.Error()
	}
	return err.Error()
}

// wait waits d or until ctx ends, reporting whether d passed.
func wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
