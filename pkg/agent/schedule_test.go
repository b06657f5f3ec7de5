package agent

import (
	"testing"
	"time"
)

func TestJitter(t *testing.T) {
	const m = time.Minute
	tests := []struct {
		name string
		d    time.Duration
		frac float64
		r    float64
		want time.Duration
	}{
		{"middle is the interval", m, 0.1, 0.5, m},
		{"lowest is -10%", m, 0.1, 0, 54 * time.Second},
		{"highest approaches +10%", m, 0.1, 0.999999, 66 * time.Second},
		{"quarter", m, 0.1, 0.25, 57 * time.Second},
		{"no jitter", m, 0, 0.9, m},
		{"negative jitter is none", m, -1, 0.9, m},
		{"zero interval disables", 0, 0.1, 0.9, 0},
		{"negative interval disables", -m, 0.1, 0.9, 0},
		{"out-of-range rand is the middle", m, 0.1, 7, m},
		{"jitter clamped below 1 stays positive", m, 5, 0, 600 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Jitter(tt.d, tt.frac, func() float64 { return tt.r })
			if diff := got - tt.want; diff < -time.Millisecond || diff > time.Millisecond {
				t.Errorf("Jitter(%v, %v, %v) = %v, want %v", tt.d, tt.frac, tt.r, got, tt.want)
			}
		})
	}
}

func TestScheduleNext(t *testing.T) {
	s := NewSchedule(time.Minute)
	seq := []float64{0, 0.5, 0.75}
	i := 0
	s.Rand = func() float64 { x := seq[i]; i++; return x }
	for _, want := range []time.Duration{54 * time.Second, time.Minute, 63 * time.Second} {
		if got := s.Next(); got != want {
			t.Errorf("Next() = %v, want %v", got, want)
		}
	}
}

func TestScheduleRealRandStaysInBounds(t *testing.T) {
	s := NewSchedule(10 * time.Second)
	lo, hi := 9*time.Second, 11*time.Second
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := s.Next()
		if d < lo || d > hi {
			t.Fatalf("Next() = %v, outside [%v, %v]", d, lo, hi)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct waits in 1000: not jittered", len(seen))
	}
}
