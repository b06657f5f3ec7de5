// Package notify tells people what a host decides without being asked:
// each Notifier is an events.Sink that filters, de-duplicates and queues
// events, and delivers them beside the agent's loop to one endpoint (a
// signed webhook, a Slack-compatible incoming webhook, or a forge's
// commit status), never blocking the one who emits.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/events"
)

const userAgent = "cortex-sync"

// Defaults of Options.
const (
	DefaultQueueSize = 256
	DefaultAttempts  = 5
	DefaultBackoff   = time.Second
	DefaultMaxDelay  = 5 * time.Minute
	DefaultTimeout   = 10 * time.Second
	// drainTimeout bounds the delivery of what is queued when the agent
	// stops: one attempt each, no retries.
	drainTimeout = 5 * time.Second
	// maxTracked bounds the events remembered for de-duplication and the
	// conditions remembered for "recovered": past it, new ones are not
	// remembered (told every time, and recovered untold).
	maxTracked = 4096
)

// Options are what a notifier needs beyond its entry.
type Options struct {
	// Host is this host's name: a commit status's context is
	// cortex-sync/<Host>, so hosts never overwrite each other's.
	Host string
	// GitURL is the source's URL: a forge's repository and API when the
	// entry gives none.
	GitURL  string
	Metrics *Metrics // nil: not counted
	Log     *slog.Logger
	// Client sends the requests (default: one with a 10s timeout).
	Client *http.Client
	// QueueSize bounds what waits for delivery: past it, Emit drops.
	QueueSize int
	// Attempts bounds the tries of one delivery (5xx, 429, a rate limit
	// or a network error); Backoff is the first wait, doubling; MaxDelay
	// the longest wait a server's Retry-After may ask: longer, the
	// notification is given up.
	Attempts int
	Backoff  time.Duration
	MaxDelay time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
}

// item is one notification waiting for delivery.
type item struct {
	events.Event
	// Count > 1: the event happened Count times within Window (a repeat
	// told once the window ends).
	Count  int
	Window time.Duration
	// Raised, when set, is the warning or error this event recovers from.
	Raised *events.Event
}

// sender makes the request that delivers an item; nil: nothing to send.
type sender interface {
	request(ctx context.Context, it item) (*http.Request, error)
}

// Notifier delivers events to one endpoint. Emit filters, de-duplicates
// and queues; Run delivers, and must run for anything to be sent.
type Notifier struct {
	cfg    Config
	name   string // "webhook", "github": metrics' label and logs
	send   sender
	forge  *forgeSender // nil unless a forge: it tells only some reasons
	opts   Options
	log    *slog.Logger
	queue  chan item
	window time.Duration

	mu     sync.Mutex
	seen   map[string]*repeat      // de-duplication, by event key
	raised map[string]events.Event // conditions a told warning or error raised
}

// repeat is an event told within its window, and how often it came.
type repeat struct {
	first time.Time
	count int
	last  events.Event
}

// New makes the notifier of one entry; errors name the entry's type and
// field.
func New(c Config, o Options) (*Notifier, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: DefaultTimeout}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultBackoff
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	n := &Notifier{
		cfg: c, name: string(c.Type), opts: o, queue: make(chan item, o.QueueSize), window: c.window(),
		seen: map[string]*repeat{}, raised: map[string]events.Event{},
	}
	n.log = o.Log.With("notifier", n.name)
	switch c.Type {
	case Webhook:
		n.send = &webhookSender{url: c.URL, secret: secretFile{path: c.SecretFile, what: "secretFile"}}
	case Slack:
		n.send = &slackSender{url: c.URL}
	default:
		t, err := resolveForge(c, o.GitURL)
		if err != nil {
			return nil, err
		}
		if o.Host == "" {
			return nil, fmt.Errorf("notify %s: the host has no name for its status context", c.Type)
		}
		n.forge = &forgeSender{typ: c.Type, target: t, token: secretFile{path: c.TokenFile, what: "tokenFile"}, context: "cortex-sync/" + o.Host}
		n.send = n.forge
	}
	// A file that cannot be read now is refused at start, not at the
	// first event (it is read again at every delivery: rotation works).
	for _, f := range []secretFile{{c.SecretFile, "secretFile"}, {c.TokenFile, "tokenFile"}} {
		if f.path != "" {
			if _, err := f.read(); err != nil {
				return nil, fmt.Errorf("notify %s: %w", c.Type, err)
			}
		}
	}
	o.Metrics.init(n.name)
	return n, nil
}

// Emit takes an event: filtered, de-duplicated and queued, never
// blocking; a full queue drops it, counting.
func (n *Notifier) Emit(e events.Event) {
	if e.Time.IsZero() {
		e.Time = n.opts.Now()
	}
	n.mu.Lock()
	it, ok := n.admit(e)
	n.mu.Unlock()
	if ok {
		n.enqueue(it)
	}
}

func (n *Notifier) enqueue(it item) {
	select {
	case n.queue <- it:
	default:
		n.opts.Metrics.dropped(n.name)
	}
}

// admit decides whether e is told, and how. Called with mu held.
func (n *Notifier) admit(e events.Event) (item, bool) {
	if n.forge != nil && !n.forge.wants(e.Reason) {
		return item{}, false
	}
	// An info event that clears a condition a told warning or error
	// raised is told as a recovery, whatever the filters say: they let
	// the failure through.
	if e.Condition != "" && n.forge == nil {
		if e.Severity == events.Info {
			if r, ok := n.raised[e.Condition]; ok {
				delete(n.raised, e.Condition)
				return item{Event: e, Raised: &r}, true
			}
		} else if n.pass(e) {
			if _, ok := n.raised[e.Condition]; ok || len(n.raised) < maxTracked {
				n.raised[e.Condition] = e
			}
		}
	}
	if !n.pass(e) {
		return item{}, false
	}
	if n.window > 0 {
		k := dedupKey(e)
		if r, ok := n.seen[k]; ok && e.Time.Sub(r.first) < n.window {
			r.count++
			r.last = e
			return item{}, false
		}
		if len(n.seen) < maxTracked {
			n.seen[k] = &repeat{first: e.Time, count: 1, last: e}
		}
	}
	return item{Event: e}, true
}

// pass reports whether the entry's filters let e through.
func (n *Notifier) pass(e events.Event) bool {
	if rank(e.Severity) < rank(n.cfg.Severity) {
		return false
	}
	for _, r := range n.cfg.Exclude {
		if r == e.Reason {
			return false
		}
	}
	if len(n.cfg.Reasons) == 0 {
		return true
	}
	for _, r := range n.cfg.Reasons {
		if r == e.Reason {
			return true
		}
	}
	return false
}

func rank(s events.Severity) int {
	switch s {
	case events.Warning:
		return 1
	case events.Error:
		return 2
	}
	return 0
}

// dedupKey is what makes two events the same: everything but the time.
func dedupKey(e events.Event) string {
	return strings.Join([]string{string(e.Severity), string(e.Reason), e.Resource, e.Revision, e.Condition, e.Message}, "\x00")
}

// flush ends the windows that are over: an event that came again within
// its window is told once more, with its count.
func (n *Notifier) flush() {
	now := n.opts.Now()
	var due []item
	n.mu.Lock()
	for k, r := range n.seen {
		if now.Sub(r.first) < n.window {
			continue
		}
		delete(n.seen, k)
		if r.count > 1 && n.forge == nil {
			due = append(due, item{Event: r.last, Count: r.count, Window: n.window})
		}
	}
	n.mu.Unlock()
	for _, it := range due {
		n.enqueue(it)
	}
}

// Run delivers until ctx ends, then tries once more, briefly, what is
// still queued.
func (n *Notifier) Run(ctx context.Context) {
	every := time.Second
	if n.window > 0 && n.window/4 < every {
		every = max(n.window/4, 10*time.Millisecond)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			n.drain(ctx)
			return
		case it := <-n.queue:
			n.deliver(ctx, it, n.opts.Attempts)
		case <-tick.C:
			if n.window > 0 {
				n.flush()
			}
		}
	}
}

// drain sends what is queued, once each, within drainTimeout.
func (n *Notifier) drain(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
	defer cancel()
	for dctx.Err() == nil {
		select {
		case it := <-n.queue:
			n.deliver(dctx, it, 1)
		default:
			return
		}
	}
}

// deliver sends one item, retrying a server error, a rate limit or a
// network error up to attempts times, waiting as the server asks.
func (n *Notifier) deliver(ctx context.Context, it item, attempts int) {
	log := n.log.With("reason", it.Reason)
	for attempt := 1; ; attempt++ {
		req, err := n.send.request(ctx, it)
		if err != nil {
			n.opts.Metrics.failed(n.name)
			log.Warn("notification not sent", "error", err)
			return
		}
		if req == nil {
			return
		}
		wait, retry, err := n.do(req)
		if err == nil {
			n.opts.Metrics.sent(n.name)
			log.Debug("notification sent")
			return
		}
		if !retry || attempt >= attempts || ctx.Err() != nil {
			n.opts.Metrics.failed(n.name)
			log.Warn("notification failed", "attempts", attempt, "error", err)
			return
		}
		if wait == 0 {
			wait = n.opts.Backoff << (attempt - 1)
			wait += rand.N(wait/4 + 1) // hosts that failed together do not retry together
		}
		if wait > n.opts.MaxDelay {
			n.opts.Metrics.failed(n.name)
			log.Warn("notification given up: the server asks to wait longer than allowed", "wait", wait, "error", err)
			return
		}
		n.opts.Metrics.retried(n.name)
		log.Debug("notification retried", "wait", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			n.opts.Metrics.failed(n.name)
			return
		case <-t.C:
		}
	}
}

// do sends req once: nil on a 2xx; else whether to retry, and after how
// long when the server says (Retry-After, GitHub's rate-limit reset).
func (n *Notifier) do(req *http.Request) (time.Duration, bool, error) {
	resp, err := n.opts.Client.Do(req)
	if err != nil {
		return 0, true, redact(err)
	}
	defer resp.Body.Close()
	var detail [256]byte
	k, _ := resp.Body.Read(detail[:])
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, false, nil
	}
	err = fmt.Errorf("%s answered %s", redactURL(req.URL), resp.Status)
	if msg := strings.TrimSpace(string(detail[:k])); msg != "" && n.forge != nil {
		err = fmt.Errorf("%w: %s", err, firstLine(msg)) // a forge says why (permission, unknown commit)
	}
	wait := retryAfter(resp.Header, n.opts.Now())
	limited := resp.StatusCode == http.StatusTooManyRequests ||
		// GitHub's primary limit answers 403 with no requests left;
		// its secondary one, 403 with a Retry-After.
		(resp.StatusCode == http.StatusForbidden && (resp.Header.Get("X-Ratelimit-Remaining") == "0" || resp.Header.Get("Retry-After") != ""))
	switch {
	case limited:
		if wait == 0 {
			wait = time.Minute // GitHub: "wait for at least one minute"
		}
		return wait, true, err
	case resp.StatusCode >= 500:
		return wait, true, err
	}
	return 0, false, err
}

// retryAfter is how long the server asks to wait: Retry-After (seconds
// or a date), else GitHub's x-ratelimit-reset when nothing is left.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			return max(time.Duration(s)*time.Second, time.Millisecond)
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(t.Sub(now), time.Millisecond)
		}
	}
	if h.Get("X-Ratelimit-Remaining") == "0" {
		if s, err := strconv.ParseInt(h.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(s, 0).Sub(now), time.Millisecond)
		}
	}
	return 0
}

// secretFile is a file a secret is read from, at every delivery.
type secretFile struct {
	path string
	what string // the field: "tokenFile"
}

func (s secretFile) read() (string, error) {
	if s.path == "" {
		return "", nil
	}
	b, err := os.ReadFile(s.path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", s.what, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s %s is empty", s.what, s.path)
	}
	return v, nil
}

// redact keeps a URL's path out of an error: a Slack webhook's URL is
// its secret.
func redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		u, perr := url.Parse(ue.URL)
		if perr == nil {
			return fmt.Errorf("%s %s: %w", ue.Op, redactURL(u), ue.Err)
		}
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

func redactURL(u *url.URL) string { return u.Scheme + "://" + u.Host + "/…" }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
