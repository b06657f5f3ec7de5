//go:build linux

package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sample is one run of a command: its wall time, the CPU time the kernel
// accounted to it and to the children it waited for (user + system, from
// wait4), and its peak RSS.
type sample struct {
	wall, cpu time.Duration
	maxRSS    int64 // KiB
	// Of a job with a watch: the most the state dir and its intent logs
	// held at any sample during the run, in bytes.
	peakState, peakIntent int64
}

// job is a command to time and what to do before each run of it.
type job struct {
	setup func() error
	name  string
	args  []string
	watch string // a state dir whose size to sample during the run, or ""
}

// pairs is a comparison: a run of the baseline and a run of ours, in
// alternation, and the load average before and after.
type pairs struct {
	base, ours            []sample
	loadBefore, loadAfter float64
}

// pair times two jobs in alternation, a run of one then a run of the
// other, the first of each pair alternating too, so that slow drifts of
// the machine (disk writeback, another process's burst, caches warmed by
// the one before) fall on both sides alike. Ratios are taken pair by pair.
// A job with no name is no peer: its samples are zero.
func pair(runs int, a, b job) (*pairs, error) {
	return alternate(runs, 0, nil,
		func(int) (sample, error) { return measure(a) },
		func(int) (sample, error) { return measure(b) })
}

// alternate runs warmup pairs, unrecorded, then n pairs: setup (when
// given), then a run of base and one of ours, the first of each pair
// alternating.
func alternate(n, warmup int, setup func(int) error, base, ours func(int) (sample, error)) (*pairs, error) {
	p := &pairs{loadBefore: loadAvg()}
	for i := range warmup + n {
		if setup != nil {
			if err := setup(i); err != nil {
				return nil, err
			}
		}
		first, second := base, ours
		if i%2 == 1 {
			first, second = ours, base
		}
		s1, err := first(i)
		if err != nil {
			return nil, err
		}
		s2, err := second(i)
		if err != nil {
			return nil, err
		}
		if i%2 == 1 {
			s1, s2 = s2, s1
		}
		if i >= warmup {
			p.base, p.ours = append(p.base, s1), append(p.ours, s2)
		}
	}
	p.loadAfter = loadAvg()
	return p, nil
}

func measure(j job) (sample, error) {
	if j.name == "" {
		return sample{}, nil
	}
	if j.setup != nil {
		if err := j.setup(); err != nil {
			return sample{}, err
		}
	}
	// Flush what earlier runs left dirty, so no run pays for another's
	// writeback.
	syscall.Sync()
	cmd := exec.Command(j.name, j.args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	var peakState, peakIntent int64
	var err error
	if j.watch == "" {
		err = cmd.Run()
	} else if err = cmd.Start(); err == nil {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		tick := time.NewTicker(20 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case err = <-done:
				waiting = false
			case <-tick.C:
			}
			st, in := dirBytes(j.watch)
			peakState, peakIntent = max(peakState, st), max(peakIntent, in)
		}
		tick.Stop()
	}
	wall := time.Since(start)
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 && slices.Contains(j.args, "--exit-code") {
		err = nil // diff --exit-code reports changes with 1
	}
	if err != nil {
		return sample{}, fmt.Errorf("%s %s: %v\n%s", j.name, strings.Join(j.args, " "), err, stderr.String())
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return sample{wall: wall, cpu: cpu, maxRSS: ru.Maxrss, peakState: peakState, peakIntent: peakIntent}, nil
}

// dirBytes is the bytes of the files under dir, and of those among them
// that are intent logs (*.intent). A file that goes while it is walked is
// skipped.
func dirBytes(dir string) (all, intent int64) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		all += fi.Size()
		if strings.HasSuffix(p, ".intent") {
			intent += fi.Size()
		}
		return nil
	})
	return all, intent
}

// loadAvg is the one-minute load average; 0 where it cannot be read.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

func medianOf[T int64 | float64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// summary is what a row prints of a comparison: the median of each side,
// and the median of the per-pair ratios (not the ratio of the medians).
type summary struct {
	baseWall, oursWall, baseCPU, oursCPU time.Duration
	wallRatio, cpuRatio                  float64
	rss, baseRSS                         int64 // KiB, the most of the runs
}

func summarize(p *pairs) summary {
	var s summary
	var bw, ow, bc, oc []time.Duration
	var wr, cr []float64
	for i := range p.base {
		b, o := p.base[i], p.ours[i]
		bw, ow, bc, oc = append(bw, b.wall), append(ow, o.wall), append(bc, b.cpu), append(oc, o.cpu)
		wr = append(wr, float64(o.wall)/float64(max(b.wall, 1)))
		cr = append(cr, float64(o.cpu)/float64(max(b.cpu, time.Millisecond)))
		s.rss, s.baseRSS = max(s.rss, o.maxRSS), max(s.baseRSS, b.maxRSS)
	}
	s.baseWall, s.oursWall, s.baseCPU, s.oursCPU = medianOf(bw), medianOf(ow), medianOf(bc), medianOf(oc)
	s.wallRatio, s.cpuRatio = medianOf(wr), medianOf(cr)
	return s
}

// target is what a row must reach; a zero field is not checked.
type target struct {
	wall, cpu   float64 // ratios to the baseline
	rssMB       float64
	median, p99 time.Duration // latencies of ours (the agent's rows)
}

// table prints the rows, under a header printed with the first, and keeps
// whether every target held.
type table struct{ ok, headed bool }

func newTable() *table { return &table{ok: true} }

func (t *table) header() {
	if t.headed {
		return
	}
	t.headed = true
	fmt.Printf("%-44s %9s %9s %6s %9s %9s %6s %8s %8s %11s  %s\n",
		"measurement", "base", "cortex", "wall", "base", "cortex", "CPU", "base", "cortex", "load", "targets")
	fmt.Printf("%-44s %9s %9s %6s %9s %9s %6s %8s %8s %11s\n",
		"(medians; ratios: median of the pairs')", "wall", "wall", "ratio", "CPU", "CPU", "ratio", "peak RSS", "peak RSS", "before→after")
}

func (t *table) row(name string, p *pairs, want target) {
	t.header()
	s := summarize(p)
	if s.baseWall == 0 { // no peer: ours alone
		want.wall, want.cpu = 0, 0
	}
	var verdicts []string
	check := func(what string, got, limit float64, unit string) {
		if limit <= 0 {
			return
		}
		v := fmt.Sprintf("%s≤%g%s ok", what, limit, unit)
		if got > limit {
			v = fmt.Sprintf("%s≤%g%s OVER", what, limit, unit)
			t.ok = false
		}
		verdicts = append(verdicts, v)
	}
	rssMB := float64(s.rss) / 1024
	check("wall", s.wallRatio, want.wall, "×")
	check("CPU", s.cpuRatio, want.cpu, "×")
	check("RSS", rssMB, want.rssMB, " MB")
	if s.baseWall == 0 {
		fmt.Printf("%-44s %9s %9s %6s %9s %9s %6s %8s %5.1f MB %5.1f→%-5.1f  %s\n", name,
			"—", ms(s.oursWall), "—", "—", ms(s.oursCPU), "—", "—",
			rssMB, p.loadBefore, p.loadAfter, strings.Join(verdicts, ", "))
		return
	}
	fmt.Printf("%-44s %9s %9s %5.2f× %9s %9s %5.2f× %5.1f MB %5.1f MB %5.1f→%-5.1f  %s\n", name,
		ms(s.baseWall), ms(s.oursWall), s.wallRatio, ms(s.baseCPU), ms(s.oursCPU), s.cpuRatio,
		float64(s.baseRSS)/1024, rssMB, p.loadBefore, p.loadAfter, strings.Join(verdicts, ", "))
}

func ms(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}

// spinEnv makes this program a spinner: it keeps one core busy until it
// is killed (-busy).
const spinEnv = "CORTEX_SYNC_BENCH_SPIN"

func spinIfAsked() {
	if os.Getenv(spinEnv) == "" {
		return
	}
	//lint:ignore SA5002 it spins on purpose: one core kept busy (-busy)
	for {
	}
}

// startSpinner runs a copy of this program that keeps one core busy, and
// returns what stops it. It dies with the benchmark should that be killed.
func startSpinner() (func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), spinEnv+"=1", "GOMAXPROCS=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {
		cmd.Process.Kill()
		cmd.Wait()
	}, nil
}
