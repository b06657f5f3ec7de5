package resource

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window is a deploy window: from each start its Schedule gives, for
// Duration, a host may take a new revision. Outside every window of its
// rule (or of the rollout) a host stays on the revision it is on, healing
// it.
type Window struct {
	// Schedule is when the window opens, in cron's five fields: minute
	// hour day-of-month month day-of-week ("0 22 * * 1-5": 22:00 on
	// weekdays). Each field is *, a number, a range a-b, a step */n or
	// a-b/n, or a comma list of them; day-of-week 0 and 7 are Sunday.
	// As in cron, when both day fields are restricted either may match.
	Schedule string `yaml:"schedule" json:"schedule"`
	// Duration is how long the window stays open: 1m to 7 days.
	Duration Duration `yaml:"duration" json:"duration"`
	// TimeZone is the IANA zone Schedule is read in ("Europe/Paris");
	// "" is UTC.
	TimeZone string `yaml:"timeZone" json:"timeZone,omitempty"`
}

// Bounds of a window's duration.
const (
	MinWindowDuration = Duration(time.Minute)
	MaxWindowDuration = Duration(7 * 24 * time.Hour)
)

// windowSearch bounds how far ahead the next opening is looked for: a
// schedule that fires less often than this (Feb 30) never opens.
const windowSearch = 5 * 366 * 24 * time.Hour

// Problems lists what is wrong with w, by field ("schedule", "duration",
// "timeZone").
func (w Window) Problems() []RolloutProblem {
	var out []RolloutProblem
	bad := func(field, msg string) { out = append(out, RolloutProblem{Field: field, Msg: msg}) }
	sched, err := parseCron(w.Schedule)
	if err != nil {
		bad("schedule", err.Error())
	}
	switch {
	case w.Duration == 0:
		bad("duration", "is required: how long the window stays open, e.g. \"2h\"")
	case w.Duration < MinWindowDuration:
		bad("duration", fmt.Sprintf("must be at least %s", MinWindowDuration.Std()))
	case w.Duration > MaxWindowDuration:
		bad("duration", fmt.Sprintf("must be at most %s", MaxWindowDuration.Std()))
	}
	loc, err := loadZone(w.TimeZone)
	if err != nil {
		bad("timeZone", err.Error())
	}
	if sched != nil && loc != nil {
		from := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
		if _, ok := sched.next(from, from.Add(windowSearch)); !ok {
			bad("schedule", fmt.Sprintf("%q never opens: no date matches it", w.Schedule))
		}
	}
	return out
}

func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("%q is not an IANA time zone such as \"Europe/Paris\" or \"UTC\"", name)
	}
	return loc, nil
}

// Windows are a rule's (or a rollout's) deploy windows: a host may take a
// new revision while any of them is open. None: at any time.
type Windows []Window

// At says whether a window is open at t, and when none is, when the next
// opens (zero: never, which validation refuses). A window that does not
// pass validation is never open.
func (ws Windows) At(t time.Time) (open bool, next time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	for _, w := range ws {
		sched, err := parseCron(w.Schedule)
		loc, zerr := loadZone(w.TimeZone)
		if err != nil || zerr != nil || w.Duration < MinWindowDuration || w.Duration > MaxWindowDuration {
			continue
		}
		lt := t.In(loc)
		// Open when a start fell within the last Duration.
		if start, ok := sched.prev(lt, lt.Add(-w.Duration.Std())); ok && lt.Before(start.Add(w.Duration.Std())) {
			return true, time.Time{}
		}
		if n, ok := sched.next(lt, lt.Add(windowSearch)); ok && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return false, next
}

// cron is a parsed five-field schedule: the values each field allows.
type cron struct {
	minute, hour, dom, month, dow uint64
	domStar, dowStar              bool
}

var cronFields = []struct {
	name     string
	min, max int
}{{"minute", 0, 59}, {"hour", 0, 23}, {"day of month", 1, 31}, {"month", 1, 12}, {"day of week", 0, 7}}

func parseCron(s string) (*cron, error) {
	f := strings.Fields(s)
	if len(f) != 5 {
		return nil, fmt.Errorf("%q is not a schedule: write cron's five fields, minute hour day-of-month month day-of-week, e.g. \"0 22 * * 1-5\"", s)
	}
	var sets [5]uint64
	for i, field := range f {
		set, err := parseCronField(field, cronFields[i].min, cronFields[i].max)
		if err != nil {
			return nil, fmt.Errorf("%q: %s field %q: %v", s, cronFields[i].name, field, err)
		}
		sets[i] = set
	}
	c := &cron{minute: sets[0], hour: sets[1], dom: sets[2], month: sets[3], dow: sets[4], domStar: f[2] == "*", dowStar: f[4] == "*"}
	if c.dow&(1<<7) != 0 {
		c.dow |= 1 // 7 is Sunday too
	}
	return c, nil
}

func parseCronField(field string, lo, hi int) (uint64, error) {
	var set uint64
	for part := range strings.SplitSeq(field, ",") {
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > hi {
				return 0, fmt.Errorf("step %q must be a number from 1 to %d", stepText, hi)
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*":
		case strings.Contains(rng, "-"):
			x, y, _ := strings.Cut(rng, "-")
			var err error
			if a, err = cronNumber(x, lo, hi); err != nil {
				return 0, err
			}
			if b, err = cronNumber(y, lo, hi); err != nil {
				return 0, err
			}
			if a > b {
				return 0, fmt.Errorf("range %q runs backwards", rng)
			}
		default:
			n, err := cronNumber(rng, lo, hi)
			if err != nil {
				return 0, err
			}
			a, b = n, n
			if hasStep {
				b = hi // "5/15" is 5-hi/15, as in cron
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

func cronNumber(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q must be a number from %d to %d", s, lo, hi)
	}
	return n, nil
}

// dayMatches applies cron's rule: with both day fields restricted, either
// may match.
func (c *cron) dayMatches(t time.Time) bool {
	dom := c.dom&(1<<t.Day()) != 0
	dow := c.dow&(1<<int(t.Weekday())) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

func (c *cron) matches(t time.Time) bool {
	return c.month&(1<<int(t.Month())) != 0 && c.dayMatches(t) && c.hour&(1<<t.Hour()) != 0 && c.minute&(1<<t.Minute()) != 0
}

// next is the first start at or after t, before limit.
func (c *cron) next(t, limit time.Time) (time.Time, bool) {
	loc := t.Location()
	if t.Second() != 0 || t.Nanosecond() != 0 {
		t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute()+1, 0, 0, loc)
	}
	for t.Before(limit) {
		was := t
		switch {
		case c.month&(1<<int(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, loc)
		case !c.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
		case c.hour&(1<<t.Hour()) == 0:
			t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour()+1, 0, 0, 0, loc)
		case c.minute&(1<<t.Minute()) == 0:
			t = t.Add(time.Minute)
		default:
			return t, true
		}
		if !t.After(was) { // a clock change folded the step back
			t = was.Add(time.Minute)
		}
	}
	return time.Time{}, false
}

// prev is the last start at or before t (to the minute), not before
// limit.
func (c *cron) prev(t, limit time.Time) (time.Time, bool) {
	t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), 0, 0, t.Location())
	for ; !t.Before(limit); t = t.Add(-time.Minute) {
		if c.matches(t) {
			return t, true
		}
	}
	return time.Time{}, false
}
