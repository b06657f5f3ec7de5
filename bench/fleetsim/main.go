// Command fleetsim simulates a fleet against a real etcd: N hosts, each a
// member of the real pkg/fleet on its own etcd client (as N agents are),
// join (presence on a lease, a status written as an agent writes it, so
// that cortex-sync fleet status reads them), then roll one or more new
// revisions through all of them: ask for a slot as an agent does (again
// on a change or at the answer's RetryAfter; a second after an error),
// "apply" for -apply, pass minReady, report the status and the verdict.
// No processes, no Git: what it measures is the coordination.
//
//	go run ./bench/fleetsim -endpoints http://127.0.0.1:23791,... -fleet sim \
//	    -hosts 1000 -max-unavailable 10% -min-ready 1s -apply 500ms
//
// It prints, per rollout: the hosts good; "rollout Xs ideal Ys" (the first
// slot taken to the last verdict written, beside waves x (apply +
// minReady), waves = ceil(N / slots)); etcd's raft proposals, watch events
// and bytes sent per host, and lease expiries, from the members' /metrics
// (the client URLs, or -metrics-urls when the endpoints are gRPC proxies);
// presence keys deleted (a watch of its own); the peak of slots in use;
// the hosts' errors and warnings (unreachable, slow, a lease lost); and
// CPU user+sys of the simulator, of the members (and of the proxies, with
// -proxy-metrics-urls) beside wall time and the load. Before the rollouts it measures
// the members' RSS and Go heap before and after the hosts connect, and the
// keep-alives an idle fleet sends. It exits 1 when a rollout does not
// complete within -timeout, 2 on bad flags or an etcd it cannot read.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cortex-sync/cortex-sync/internal/benchstat"
	"github.com/cortex-sync/cortex-sync/pkg/fleet"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	endpoints   []string
	metricsURLs []string
	proxyURLs   []string
	fleet       string
	hosts       int
	maxUnavail  resource.IntOrPercent
	minReady    time.Duration
	apply       time.Duration
	timeout     time.Duration
	joinTimeout time.Duration
	joinRate    float64
	idle        time.Duration
	rollouts    int
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	eps := fs.String("endpoints", "", "etcd client URLs (members or gRPC proxies), comma-separated")
	murls := fs.String("metrics-urls", "", "the members' URLs whose /metrics to read (default: -endpoints; give them when the endpoints are proxies)")
	purls := fs.String("proxy-metrics-urls", "", "gRPC proxies' metrics URLs (their --metrics-addr), to report their RAM and CPU too")
	fs.StringVar(&o.fleet, "fleet", "fleetsim", "the fleet's name (its keys are below /cortex-sync/NAME/)")
	fs.IntVar(&o.hosts, "hosts", 100, "simulated hosts")
	mu := fs.String("max-unavailable", "10%", "the rollout's maxUnavailable: a count or a percentage")
	fs.DurationVar(&o.minReady, "min-ready", time.Second, "the rollout's minReady")
	fs.DurationVar(&o.apply, "apply", 500*time.Millisecond, "how long a host takes to apply a revision")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "a rollout not complete after this fails the run")
	fs.DurationVar(&o.joinTimeout, "join-timeout", 2*time.Minute, "how long the hosts may take to be present with their status written")
	fs.Float64Var(&o.joinRate, "join-rate", 0, "hosts joining a second (0: all at once, as after a fleet-wide restart)")
	fs.DurationVar(&o.idle, "idle", 10*time.Second, "how long to count an idle fleet's keep-alives before rolling out")
	fs.IntVar(&o.rollouts, "rollouts", 1, "revisions to roll out, one after the other")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	o.endpoints = split(*eps)
	if len(o.endpoints) == 0 {
		return o, errors.New("-endpoints: give the etcd client URLs, e.g. http://127.0.0.1:23791,http://127.0.0.1:23792,http://127.0.0.1:23793")
	}
	o.metricsURLs = split(*murls)
	if len(o.metricsURLs) == 0 {
		o.metricsURLs = o.endpoints
	}
	o.proxyURLs = split(*purls)
	if o.hosts < 1 {
		return o, fmt.Errorf("-hosts %d: simulate 1 host or more", o.hosts)
	}
	if o.rollouts < 1 {
		return o, fmt.Errorf("-rollouts %d: roll out 1 revision or more", o.rollouts)
	}
	var err error
	if o.maxUnavail, err = resource.ParseIntOrPercent(*mu); err != nil {
		return o, fmt.Errorf("-max-unavailable: %w", err)
	}
	if o.joinRate < 0 {
		return o, fmt.Errorf("-join-rate %g: must not be negative", o.joinRate)
	}
	for name, d := range map[string]time.Duration{"-min-ready": o.minReady, "-apply": o.apply, "-idle": o.idle} {
		if d < 0 {
			return o, fmt.Errorf("%s %s: must not be negative", name, d)
		}
	}
	return o, nil
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim:", err)
		return 2
	}
	s := &sim{o: o, out: stdout, log: &logCount{counts: map[string]int{}}}
	ok, err := s.run(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "fleetsim:", err)
		return 2
	}
	if !ok {
		return 1
	}
	return 0
}

// sim is one run: the hosts, and what it prints.
type sim struct {
	o     options
	out   io.Writer
	hosts []*fleet.Member
	log   *logCount // what the hosts logged
}

// logCount is a slog handler that counts the hosts' warnings by message
// ("fleet slot lease lost; taking it again", "coordinator slow: …").
type logCount struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *logCount) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logCount) WithAttrs([]slog.Attr) slog.Handler            { return l }
func (l *logCount) WithGroup(string) slog.Handler                 { return l }
func (l *logCount) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.counts[r.Message]++
	l.mu.Unlock()
	return nil
}

// take returns the counts so far, "none" for none, and starts again.
func (l *logCount) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for msg, n := range l.counts {
		out = append(out, fmt.Sprintf("%dx %q", n, msg))
	}
	l.counts = map[string]int{}
	if len(out) == 0 {
		return "none"
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func (s *sim) printf(format string, args ...any) { fmt.Fprintf(s.out, format+"\n", args...) }

func (s *sim) run(ctx context.Context) (bool, error) {
	o := s.o
	slots := o.maxUnavail.Of(o.hosts)
	waves := int(math.Ceil(float64(o.hosts) / float64(slots)))
	ideal := time.Duration(waves) * (o.apply + o.minReady)
	s.printf("fleetsim: %d hosts in fleet %q, maxUnavailable %s (%d slots, %d waves), minReady %s, apply %s; endpoints %s; metrics from %s",
		o.hosts, o.fleet, o.maxUnavail, slots, waves, o.minReady, o.apply, strings.Join(o.endpoints, ","), strings.Join(o.metricsURLs, ","))

	before, err := s.scrape(ctx)
	if err != nil {
		return false, err
	}
	reader, err := fleet.Dial(fleet.Config{Endpoints: o.endpoints, Fleet: o.fleet, RequestTimeout: 30 * time.Second})
	if err != nil {
		return false, err
	}
	defer reader.Close()
	defer s.leave()

	prev := "main@sha1:" + nonce()
	if err := s.join(ctx, reader, prev); err != nil {
		return false, err
	}
	time.Sleep(2 * fleet.DefaultDebounce) // quiet: no status write on its way
	idle0, err := s.scrape(ctx)
	if err != nil {
		return false, err
	}
	idleCPU := benchstat.CPU(false)
	if !sleep(ctx, o.idle) {
		return false, ctx.Err()
	}
	idle1, err := s.scrape(ctx)
	if err != nil {
		return false, err
	}
	n := float64(o.hosts)
	dt := idle1.at.Sub(idle0.at).Seconds()
	ka := delta(idle0, idle1, mKeepAlives) / dt
	if w := s.log.take(); w != "none" {
		s.printf("hosts' warnings while joining and idle: %s", w)
	}
	s.printf("idle %.0fs: keep-alives %.0f/s (%.3f/s per host), proposals %.0f, watchers %.1f per host; CPU user+sys of the members %.2fs (%s), of fleetsim %.2fs",
		dt, ka, ka/n, maxDelta(idle0, idle1, mProposals), (idle1.sum(mWatchers)-before.sum(mWatchers))/n,
		delta(idle0, idle1, mCPU), perMember(idle0, idle1, mCPU), (benchstat.CPU(false) - idleCPU).Seconds())
	nm := float64(len(idle1.members))
	s.printf("member RAM per connected host: RSS %+.1f KiB, Go heap in use %+.1f KiB (mean of %d members; RSS before %s, after %s)",
		delta(before, idle1, mRSS)/nm/n/1024, delta(before, idle1, mHeap)/nm/n/1024, len(idle1.members),
		before.each(mRSS, mib), idle1.each(mRSS, mib))
	if np := float64(len(idle1.proxies)); np > 0 {
		pb, pa := before.proxy(), idle1.proxy()
		s.printf("proxy RAM per connected host: RSS %+.1f KiB, Go heap in use %+.1f KiB (mean of %d proxies; RSS before %s, after %s)",
			delta(pb, pa, mRSS)/np/n/1024, delta(pb, pa, mHeap)/np/n/1024, len(idle1.proxies),
			pb.each(mRSS, mib), pa.each(mRSS, mib))
	}

	all := true
	for i := range o.rollouts {
		rev := fleet.Revision{ID: "main@sha1:" + nonce(), Rollout: resource.Rollout{
			MaxUnavailable: o.maxUnavail, MinReady: resource.Duration(o.minReady), FailureThreshold: 1}}
		s.printf("")
		s.printf("rollout %d of %d: %s", i+1, o.rollouts, rev.ID)
		ok, err := s.rollout(ctx, rev, prev, ideal)
		if err != nil {
			return false, err
		}
		if !ok {
			all = false
			break
		}
		prev = rev.ID
	}
	return all, nil
}

// scrape reads the members' metrics, and the proxies' (in the same
// scrape, after the members) when -proxy-metrics-urls names them.
func (s *sim) scrape(ctx context.Context) (scrape, error) {
	m, err := scrapeAll(ctx, s.o.metricsURLs, true)
	if err != nil {
		return m, err
	}
	p, err := scrapeAll(ctx, s.o.proxyURLs, false)
	if err != nil {
		return m, err
	}
	m.proxies = p.members
	return m, nil
}

// watchPresence counts the presence keys deleted (a host's presence
// lease expired: every host stays up) until stop, on a watch of its own
// straight on the members (the key layout of docs/fleet.md).
func (s *sim) watchPresence(ctx context.Context) (lost *atomic.Int64, stop func(), err error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.o.metricsURLs, Logger: zap.NewNop(), DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, nil, fmt.Errorf("watch the presence keys: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch := cli.Watch(clientv3.WithRequireLeader(wctx), "/cortex-sync/"+s.o.fleet+"/presence/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	lost = &atomic.Int64{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range ch {
			lost.Add(int64(len(resp.Events)))
		}
	}()
	return lost, func() {
		cancel()
		<-done
		// Every host believes it is present: is its key there?
		gctx, gcancel := context.WithTimeout(ctx, 30*time.Second)
		defer gcancel()
		if r, err := cli.Get(gctx, "/cortex-sync/"+s.o.fleet+"/presence/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
			s.printf("presence keys in etcd %d of %d hosts", r.Count, s.o.hosts)
		}
		cli.Close()
	}, nil
}

// nonce names a revision no earlier run rolled out.
func nonce() string {
	b := make([]byte, 20)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// join makes every host present, with its status (on prev, healthy)
// written, and reports how long that took.
func (s *sim) join(ctx context.Context, reader *fleet.Client, prev string) error {
	o := s.o
	t0, cpu0 := time.Now(), benchstat.CPU(false)
	s.hosts = make([]*fleet.Member, o.hosts)
	for i := range o.hosts {
		c, err := fleet.Dial(fleet.Config{Endpoints: o.endpoints, Fleet: o.fleet, Log: slog.New(s.log)})
		if err != nil {
			return err
		}
		m, err := fleet.Join(c, fleet.MemberConfig{Host: resource.Host{Name: fmt.Sprintf("sim%05d", i), Labels: map[string]string{"sim": "fleetsim"}}})
		if err != nil {
			c.Close()
			return err
		}
		s.hosts[i] = m
		m.SetStatus(fleet.HostStatus{Revision: prev, Head: prev, Sync: "Synced", Health: "Healthy", LastGood: prev})
		if o.joinRate > 0 && !sleep(ctx, time.Duration(float64(time.Second)/o.joinRate)) {
			return ctx.Err()
		}
	}
	deadline := time.Now().Add(o.joinTimeout)
	for {
		present := 0
		for _, m := range s.hosts {
			if m.Present() {
				present++
			}
		}
		written := 0
		if present == o.hosts {
			// Bounded by the join's deadline: a slow etcd makes a client
			// wait up to 8 times its request timeout.
			rctx, cancel := context.WithDeadline(ctx, deadline)
			r, err := reader.Read(rctx, prev)
			cancel()
			if err == nil {
				for _, h := range r.Hosts {
					if !h.Stale && h.Revision == prev && strings.HasPrefix(h.Host, "sim") {
						written++
					}
				}
			}
		}
		if written >= o.hosts {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("after %s, %d of %d hosts present and %d statuses written (-join-timeout)", o.joinTimeout, present, o.hosts, written)
		}
		sleep(ctx, 500*time.Millisecond)
	}
	s.printf("joined: %d hosts present, statuses written, in %.1fs (CPU user+sys %.1fs; load %s)",
		o.hosts, time.Since(t0).Seconds(), (benchstat.CPU(false) - cpu0).Seconds(), benchstat.Load())
	return nil
}

// leave closes every host (their presence revoked), a few at a time.
func (s *sim) leave() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, m := range s.hosts {
		if m == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m.Close()
		})
	}
	wg.Wait()
}

// tally is what the hosts saw during one rollout.
type tally struct {
	mu          sync.Mutex
	first, last time.Time // first slot taken, last verdict written
	inUse, peak int       // hosts between their go and their verdict
	good        int
	asks        int
	waits       map[fleet.Wait]int
	unreachable int // errors that wrap fleet.ErrUnreachable
	downHosts   map[string]bool
	otherErrs   int
	firstErr    error
}

func (t *tally) add(f func(t *tally)) {
	t.mu.Lock()
	f(t)
	t.mu.Unlock()
}

func (t *tally) failed(host string, err error) {
	t.add(func(t *tally) {
		if errors.Is(err, fleet.ErrUnreachable) {
			t.unreachable++
			t.downHosts[host] = true
		} else {
			t.otherErrs++
		}
		if t.firstErr == nil {
			t.firstErr = err
		}
	})
}

// rollout rolls rev through every host and prints what it cost.
func (s *sim) rollout(ctx context.Context, rev fleet.Revision, prev string, ideal time.Duration) (bool, error) {
	o := s.o
	m0, err := s.scrape(ctx)
	if err != nil {
		return false, err
	}
	cpu0 := benchstat.CPU(false)
	t := &tally{waits: map[fleet.Wait]int{}, downHosts: map[string]bool{}}
	rctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	lost, stopWatch, err := s.watchPresence(ctx)
	if err != nil {
		return false, err
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, m := range s.hosts {
		wg.Go(func() { s.host(rctx, m, rev, prev, t0, t) })
	}
	wg.Wait()
	wall := time.Since(t0)
	cpu := benchstat.CPU(false) - cpu0
	stopWatch()
	time.Sleep(2 * fleet.DefaultDebounce) // quiet: no status write on its way
	m1, err := s.scrape(ctx)
	if err != nil {
		return false, err
	}
	n := float64(o.hosts)
	done := t.good == o.hosts
	s.printf("hosts good %d of %d", t.good, o.hosts)
	if t.first.IsZero() {
		s.printf("rollout never started: no host took a slot in %s", wall.Round(time.Millisecond))
	} else {
		s.printf("rollout %.1fs ideal %.1fs", t.last.Sub(t.first).Seconds(), ideal.Seconds())
	}
	if !done {
		s.printf("NOT COMPLETE after %s (-timeout %s)", wall.Round(time.Millisecond), o.timeout)
	}
	s.printf("peak slots in use %d of %d", t.peak, o.maxUnavail.Of(o.hosts))
	lead := "no member said it leads"
	if l := m1.leader(); l >= 0 {
		lead = fmt.Sprintf("the leader's (member %d) %.0f", l+1, m1.members[l][mProposals]-m0.members[l][mProposals])
	}
	s.printf("raft proposals per host %.2f (%.0f: the largest committed-index delta of a member; %s)",
		maxDelta(m0, m1, mProposals)/n, maxDelta(m0, m1, mProposals), lead)
	s.printf("watch events per host %.1f (%.0f), bytes sent per host %.1f KiB (%s in all)",
		delta(m0, m1, mEvents)/n, delta(m0, m1, mEvents), delta(m0, m1, mSentBytes)/n/1024, mib(delta(m0, m1, mSentBytes)))
	s.printf("lease expiries %.0f (etcd's count, leases no host held included); presence keys lost %d", delta(m0, m1, mLeaseExpired), lost.Load())
	waits := make([]string, 0, len(t.waits))
	for w, c := range t.waits {
		waits = append(waits, fmt.Sprintf("%s %d", w, c))
	}
	slices.Sort(waits)
	if len(waits) == 0 {
		waits = append(waits, "none")
	}
	s.printf("slot asks per host %.1f; refusals: %s; errors: %d unreachable (on %d hosts), %d other",
		float64(t.asks)/n, strings.Join(waits, ", "), t.unreachable, len(t.downHosts), t.otherErrs)
	s.printf("hosts' warnings: %s", s.log.take())
	if t.firstErr != nil {
		s.printf("first error: %v", t.firstErr)
	}
	s.printf("CPU user+sys: fleetsim %.1fs, etcd members %.1fs (%s), over %.1fs wall; load %s",
		cpu.Seconds(), delta(m0, m1, mCPU), perMember(m0, m1, mCPU), wall.Seconds(), benchstat.Load())
	if len(m1.proxies) > 0 {
		s.printf("CPU user+sys of the gRPC proxies %.1fs (%s)", delta(m0.proxy(), m1.proxy(), mCPU), perMember(m0.proxy(), m1.proxy(), mCPU))
	}
	return done, nil
}

func perMember(a, b scrape, name string) string {
	parts := make([]string, len(b.members))
	for i := range b.members {
		parts[i] = fmt.Sprintf("%.1fs", b.members[i][name]-a.members[i][name])
	}
	return strings.Join(parts, " / ")
}

// host is one host's part in a rollout, as an agent plays it.
func (s *sim) host(ctx context.Context, m *fleet.Member, rev fleet.Revision, prev string, t0 time.Time, t *tally) {
	// Fetched: the host knows its new head, and asks for a slot.
	m.SetStatus(fleet.HostStatus{Revision: prev, Head: rev.ID, HeadTime: t0, Sync: "Synced", Health: "Healthy", LastGood: prev})
	for {
		t.add(func(t *tally) { t.asks++ })
		d, err := m.Admit(ctx, rev)
		if err == nil && d.Go {
			break
		}
		if ctx.Err() != nil {
			return
		}
		wait := d.RetryAfter
		if err != nil {
			t.failed(m.Host(), err)
			wait = time.Second // the agent asks again in a second (fleetagent.Link.Admit)
		} else {
			t.add(func(t *tally) { t.waits[d.Wait]++ })
		}
		select {
		case <-ctx.Done():
			return
		case <-m.Changed():
		case <-time.After(wait):
		}
	}
	t.add(func(t *tally) {
		if t.first.IsZero() {
			t.first = time.Now()
		}
		t.inUse++
		t.peak = max(t.peak, t.inUse)
	})
	if !sleep(ctx, s.o.apply) {
		return
	}
	m.SetStatus(fleet.HostStatus{Revision: rev.ID, Head: rev.ID, HeadTime: t0, Sync: "Synced", Health: "Progressing", LastGood: prev})
	if !sleep(ctx, s.o.minReady) {
		return
	}
	good := fleet.HostStatus{Revision: rev.ID, Head: rev.ID, HeadTime: t0, Sync: "Synced", Health: "Healthy", LastGood: rev.ID}
	m.SetStatus(good)
	// Out of the count before the verdict frees the slot: the next host
	// may take it the moment etcd commits, before Good returns here.
	t.add(func(t *tally) { t.inUse-- })
	// The verdict, until etcd takes it (fleetagent's reporter: 5 s a try,
	// a second between tries).
	for {
		vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := m.Good(vctx, rev.ID)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		t.failed(m.Host(), err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
	t.add(func(t *tally) {
		t.good++
		t.last = time.Now()
	})
}

// sleep waits d or until ctx ends, reporting whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
