package agent

import (
	"slices"
	"testing"
	"time"
)

// fakeClock is a settable clock for tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time       { return c.t }
func (c *fakeClock) Step(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock            { return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func TestFightDetector(t *testing.T) {
	const id = "File/app-config"
	type step struct {
		wait time.Duration // clock moves by this first
		do   string        // "record", "disturb", "status" or "forget"
		want Fight         // NotBefore is given as an offset from the start in nb
		nb   time.Duration
	}
	tests := []struct {
		name  string
		opts  FightOptions
		steps []step
	}{
		{
			name: "threshold corrections are not a fight",
			steps: []step{
				{0, "record", Fight{Corrections: 1}, 0},
				{time.Minute, "record", Fight{Corrections: 2}, 0},
				{time.Minute, "record", Fight{Corrections: 3}, 0},
				{time.Minute, "record", Fight{Corrections: 4}, 0},
				{time.Minute, "record", Fight{Corrections: 5}, 0},
			},
		},
		{
			name: "one past the threshold fights: the next correction waits until it was left alone for the settle time",
			opts: FightOptions{Threshold: 2, Window: time.Hour, Settle: 2 * time.Second},
			steps: []step{
				{0, "record", Fight{Corrections: 1}, 0},
				{time.Second, "record", Fight{Corrections: 2}, 0},
				{time.Second, "record", Fight{Corrections: 3, Fighting: true}, 2*time.Second + 2*time.Second},
				// Disturbed again and again: the settle time starts over.
				{time.Second, "disturb", Fight{Corrections: 3, Fighting: true}, 3*time.Second + 2*time.Second},
				{time.Second, "disturb", Fight{Corrections: 3, Fighting: true}, 4*time.Second + 2*time.Second},
				// Left alone: corrected once it settled, and still a fight.
				{3 * time.Second, "record", Fight{Corrections: 4, Fighting: true}, 7*time.Second + 2*time.Second},
				{time.Hour, "status", Fight{}, 0},
			},
		},
		{
			name: "old corrections leave the window",
			opts: FightOptions{Threshold: 2, Window: 10 * time.Minute},
			steps: []step{
				{0, "record", Fight{Corrections: 1}, 0},
				{time.Minute, "record", Fight{Corrections: 2}, 0},
				{time.Minute, "record", Fight{Corrections: 3, Fighting: true}, 2*time.Minute + DefaultFightSettle},
				// t=10m: the first (t=0) is exactly a window old: gone.
				{8 * time.Minute, "status", Fight{Corrections: 2}, 0},
				{time.Minute, "status", Fight{Corrections: 1}, 0},
				{10 * time.Minute, "status", Fight{}, 0},
			},
		},
		{
			name: "forget starts over",
			opts: FightOptions{Threshold: 1},
			steps: []step{
				{0, "record", Fight{Corrections: 1}, 0},
				{0, "record", Fight{Corrections: 2, Fighting: true}, DefaultFightSettle},
				{0, "forget", Fight{}, 0},
				{0, "record", Fight{Corrections: 1}, 0},
			},
		},
		{
			name: "a huge count is bounded",
			opts: FightOptions{Threshold: 1},
			steps: func() []step {
				var s []step
				for i := 1; i <= 200; i++ {
					f := Fight{Corrections: min(i, 1+64)}
					nb := time.Duration(0)
					if i > 1 {
						f.Fighting, nb = true, DefaultFightSettle
					}
					s = append(s, step{0, "record", f, nb})
				}
				return s
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			start := clk.Now()
			tt.opts.Now = clk.Now
			d := NewFightDetector(tt.opts)
			var elapsed time.Duration
			for i, s := range tt.steps {
				clk.Step(s.wait)
				elapsed += s.wait
				var got Fight
				switch s.do {
				case "record":
					got = d.Record(id)
				case "disturb":
					d.Disturbed(id)
					got = d.Status(id)
				case "status":
					got = d.Status(id)
				case "forget":
					d.Forget(id)
					got = d.Status(id)
				}
				want := s.want
				if want.Fighting {
					want.NotBefore = start.Add(s.nb)
				}
				if got != want {
					t.Fatalf("step %d (%s at +%v): got %+v, want %+v", i, s.do, elapsed, got, want)
				}
			}
		})
	}
}

func TestFightDetectorFightingListAndSweep(t *testing.T) {
	clk := newFakeClock()
	d := NewFightDetector(FightOptions{Threshold: 1, Window: time.Minute, Now: clk.Now})
	for _, id := range []string{"File/b", "File/a", "File/a", "File/b", "Process/c"} {
		d.Record(id)
	}
	if got, want := d.Fighting(), []string{"File/a", "File/b"}; !slices.Equal(got, want) {
		t.Errorf("Fighting() = %v, want %v", got, want)
	}
	clk.Step(2 * time.Minute)
	d.Record("File/z") // sweeps everything older than the window
	d.mu.Lock()
	n := len(d.events)
	d.mu.Unlock()
	if n != 1 {
		t.Errorf("after a window, %d IDs remembered, want 1", n)
	}
	if got := d.Fighting(); len(got) != 0 {
		t.Errorf("Fighting() = %v after the window, want none", got)
	}
}
