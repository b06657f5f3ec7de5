package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/events"
)

// SignatureHeader carries a webhook body's HMAC-SHA256, keyed with the
// secretFile's content: "sha256=<hex>".
const SignatureHeader = "X-Cortex-Sync-Signature"

// Payload is a generic webhook's JSON body: the event, and what the
// notifier adds.
type Payload struct {
	events.Event
	// Count, when more than 1, is how often the event happened within
	// Window: a repeat told once the window ended (the first was told
	// when it came).
	Count  int    `json:"count,omitempty"`
	Window string `json:"window,omitempty"` // "5m"
	// Recovered is true when this event clears a condition a warning or
	// error told before raised; Raised is that event.
	Recovered bool          `json:"recovered,omitempty"`
	Raised    *events.Event `json:"raised,omitempty"`
}

func payload(it item) Payload {
	p := Payload{Event: it.Event, Raised: it.Raised, Recovered: it.Raised != nil}
	if it.Count > 1 {
		p.Count, p.Window = it.Count, fmtWindow(it.Window)
		p.Message = it.Message + countSuffix(it)
	}
	return p
}

// Sign is the signature header's value for body under key.
func Sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

type webhookSender struct {
	url    string
	secret secretFile // "": unsigned
}

func (w *webhookSender) request(ctx context.Context, it item) (*http.Request, error) {
	body, err := json.Marshal(payload(it))
	if err != nil {
		return nil, err
	}
	key, err := w.secret.read()
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if key != "" {
		req.Header.Set(SignatureHeader, Sign([]byte(key), body))
	}
	return req, nil
}

// slackSender posts {"text": …} to a Slack-compatible incoming webhook
// (Slack, Mattermost, Rocket.Chat, Discord's /slack endpoint).
type slackSender struct{ url string }

func (s *slackSender) request(ctx context.Context, it item) (*http.Request, error) {
	body, err := json.Marshal(map[string]string{"text": Text(it.Event, it.Count, it.Window, it.Raised)})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	return req, nil
}

// Text is an event as one chat line:
//
//	web1 warning SourceFailing: fetch: connection refused (×3 in 5m)
//	web1 recovered SourceRecovered: fetched main@sha1:… (was SourceFailing: fetch: connection refused)
func Text(e events.Event, count int, window time.Duration, raised *events.Event) string {
	var b strings.Builder
	b.WriteString(e.Host)
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if raised != nil {
		b.WriteString("recovered")
	} else {
		b.WriteString(string(e.Severity))
	}
	fmt.Fprintf(&b, " %s", e.Reason)
	if e.Resource != "" {
		fmt.Fprintf(&b, " %s", e.Resource)
	}
	fmt.Fprintf(&b, ": %s", e.Message)
	if e.Revision != "" && !strings.Contains(e.Message, e.Revision) {
		fmt.Fprintf(&b, " [%s]", e.Revision)
	}
	if count > 1 {
		b.WriteString(countSuffix(item{Count: count, Window: window}))
	}
	if raised != nil {
		fmt.Fprintf(&b, " (was %s: %s)", raised.Reason, raised.Message)
	}
	return b.String()
}

func countSuffix(it item) string {
	return fmt.Sprintf(" (×%d in %s)", it.Count, fmtWindow(it.Window))
}

// fmtWindow writes a window as people do: 5m, 1h30m, 200ms.
func fmtWindow(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
