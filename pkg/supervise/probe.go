//go:build linux

package supervise

import (
	"context"
	"fmt"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/health"
)

// startProbes runs the readiness and liveness probes of a run that just
// began (or was adopted), until endRun closes u.stop.
func (u *unit) startProbes() {
	stop := make(chan struct{})
	u.stop, u.sick = stop, make(chan string, 1)
	u.mu.Lock()
	u.runID++
	run := u.runID
	u.mu.Unlock()
	spec := u.spec
	if spec.Readiness == nil && spec.Liveness == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	check := func(p *health.Probe) error {
		return p.Check(ctx, func(ctx context.Context, argv []string) ([]byte, error) {
			return u.s.reaper.runProbe(ctx, spec, argv)
		})
	}
	// report changes the status of this run only: a probe of a run that
	// ended says nothing.
	report := func(f func(st *Status)) {
		u.mu.Lock()
		current := u.runID == run
		u.mu.Unlock()
		if current && ctx.Err() == nil {
			u.update(f)
		}
	}
	if p := spec.Readiness; p != nil {
		go readiness(ctx, p, check, report)
	}
	if p := spec.Liveness; p != nil {
		go liveness(ctx, p, check, u.sick)
	}
}

// readiness polls fast only until the first success after a (re)start —
// every fifth of the time since it began, from 10ms up to the period, so
// a fast process is seen ready at once and one that never is costs little
// — then every period. Its last error shows in the status while the
// process is not ready.
func readiness(ctx context.Context, p *health.Probe, check func(*health.Probe) error, report func(func(*Status))) {
	t := p.Timing()
	if !sleep(ctx, t.InitialDelay) {
		return
	}
	began := time.Now()
	ready, everReady := false, false
	ok, bad := 0, 0
	last := ""
	for {
		err := check(p)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			ok, bad = ok+1, 0
		} else {
			ok, bad = 0, bad+1
		}
		switch {
		case !ready && ok >= t.SuccessThreshold:
			ready, everReady, last = true, true, ""
			report(func(st *Status) { st.Ready, st.Probe, st.Message = true, "", "" })
		case ready && bad >= t.FailureThreshold:
			ready = false
			msg := fmt.Sprintf("readiness probe %s failed %d times in a row: %v", p, bad, err)
			last = msg
			report(func(st *Status) { st.Ready, st.Message, st.Probe = false, msg, msg })
		case !ready && err != nil:
			msg := fmt.Sprintf("readiness probe %s: %v", p, err)
			if msg != last {
				last = msg
				report(func(st *Status) { st.Probe = msg })
			}
		}
		wait := t.Period
		if !everReady {
			wait = min(t.Period, max(10*time.Millisecond, time.Since(began)/5))
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}

// liveness checks every period after the initial delay; failureThreshold
// failures in a row (one slow answer under load is not enough) report the
// process sick, naming the probe and its error.
func liveness(ctx context.Context, p *health.Probe, check func(*health.Probe) error, sick chan<- string) {
	t := p.Timing()
	if !sleep(ctx, t.InitialDelay) {
		return
	}
	bad := 0
	for {
		if !sleep(ctx, t.Period) {
			return
		}
		err := check(p)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			bad = 0
			continue
		}
		if bad++; bad >= t.FailureThreshold {
			sick <- fmt.Sprintf("liveness probe %s failed %d times in a row: %v", p, bad, err)
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
