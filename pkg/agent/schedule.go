package agent

import (
	"math/rand/v2"
	"time"
)

// DefaultJitter is the fraction of the interval by which a poll moves either
// way, so that many agents started together do not fetch together.
const DefaultJitter = 0.1

// Schedule is the poll schedule: an interval moved by a random jitter each
// time. The zero Jitter means none.
type Schedule struct {
	Interval time.Duration
	Jitter   float64        // fraction of Interval, in [0, 1)
	Rand     func() float64 // in [0, 1); nil is math/rand/v2.Float64
}

// NewSchedule is a schedule for interval with DefaultJitter.
func NewSchedule(interval time.Duration) Schedule {
	return Schedule{Interval: interval, Jitter: DefaultJitter}
}

// Next is the wait before the next poll: Interval ± Jitter·Interval. It is
// 0 when Interval is not positive (no polling).
func (s Schedule) Next() time.Duration {
	r := s.Rand
	if r == nil {
		r = rand.Float64
	}
	return Jitter(s.Interval, s.Jitter, r)
}

// Jitter moves d uniformly within ±frac·d using r, which returns values in
// [0, 1). frac is clamped to [0, 1) so the result stays positive for a
// positive d; a d that is not positive gives 0.
func Jitter(d time.Duration, frac float64, r func() float64) time.Duration {
	if d <= 0 {
		return 0
	}
	switch {
	case frac <= 0:
		return d
	case frac >= 1:
		frac = 0.99
	}
	x := r()
	if x < 0 || x >= 1 {
		x = 0.5
	}
	off := time.Duration((2*x - 1) * frac * float64(d))
	return max(d+off, 1)
}
