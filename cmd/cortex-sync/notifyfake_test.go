package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/cortex-sync/cortex-sync/pkg/notify/notifytest"
)

// cmdNotifyFake starts a fake notification endpoint in the test process,
// for the rest of the script (pkg/notify/notifytest: each implements its
// API's documented contract):
//
//	notifyfake NAME webhook KEYFILE                     signed JSON bodies
//	notifyfake NAME slack                               {"text": …}
//	notifyfake NAME github|gitlab|gitea TOKENFILE REPO  commit statuses
//
// with, after them, -limit N (the first N requests get the rate limit:
// 429 and Retry-After: 1; GitHub: 403, x-ratelimit-remaining 0) or -hang
// (it takes the connection and never answers). It sets $NAME_URL (a
// forge's API) and, after each request, writes what it took to
// $WORK/NAME.json: requests (a webhook's also "after": the time since
// the request before each), refused, bodies, texts, and statuses by
// "SHA CONTEXT". A webhook also writes each body it read as sent, one a
// line, to $WORK/NAME.bodies, and its signature header to $WORK/NAME.sigs
// (hmacsig checks them).
func cmdNotifyFake(ts *testscript.TestScript, neg bool, args []string) {
	usage := "usage: notifyfake NAME webhook KEYFILE | NAME slack | NAME github|gitlab|gitea TOKENFILE REPO [-limit N] [-hang]"
	if neg || len(args) < 2 {
		ts.Fatalf("%s", usage)
	}
	name, typ := args[0], args[1]
	rest := args[2:]
	read := func(file string) string { return strings.TrimSpace(ts.ReadFile(file)) }
	limit, hang := 0, false
	var opts []string
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case "-limit":
			if i+1 >= len(rest) {
				ts.Fatalf("%s", usage)
			}
			n, err := strconv.Atoi(rest[i+1])
			if err != nil {
				ts.Fatalf("notifyfake: -limit %q", rest[i+1])
			}
			limit, i = n, i+1
		case "-hang":
			hang = true
		default:
			opts = append(opts, rest[i])
		}
	}
	// Read once, here: the fake's handlers run on the server's goroutines,
	// and the script's env is the script goroutine's (env lines write it).
	work := ts.Getenv("WORK")
	state := filepath.Join(work, name+".json")
	var mu sync.Mutex // one writer; each snapshot taken under it, so the last is the newest
	write := func(snapshot func() map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.MarshalIndent(snapshot(), "", "  ")
		tmp := state + ".tmp"
		if os.WriteFile(tmp, append(b, '\n'), 0o600) == nil {
			os.Rename(tmp, state)
		}
	}
	unblock := make(chan struct{})
	switch typ {
	case "webhook", "slack":
		key := ""
		if typ == "webhook" {
			if len(opts) != 1 {
				ts.Fatalf("%s", usage)
			}
			key = read(opts[0])
		}
		h := notifytest.NewHook(key)
		h.Answer = func(w http.ResponseWriter, n int) bool {
			switch {
			case hang:
				h.Changed(h) // it took the request: counted, though it never answers
				<-unblock
				return true
			case n <= limit:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "rate_limited", http.StatusTooManyRequests)
				return true
			}
			return false
		}
		h.Changed = func(h *notifytest.Hook) {
			if typ == "webhook" {
				var bodies, sigs []byte
				for _, r := range h.Received() {
					bodies = append(append(bodies, r.Body...), '\n')
					sigs = append(append(sigs, r.Signature...), '\n')
				}
				mu.Lock()
				os.WriteFile(filepath.Join(work, name+".bodies"), bodies, 0o600)
				os.WriteFile(filepath.Join(work, name+".sigs"), sigs, 0o600)
				mu.Unlock()
			}
			write(func() map[string]any {
				times := h.Requests()
				after := make([]string, len(times)) // since the request before: a retry waited as told
				for i := range times {
					after[i] = "0s"
					if i > 0 {
						after[i] = times[i].Sub(times[i-1]).Round(time.Millisecond).String()
					}
				}
				return map[string]any{"requests": len(times), "after": after, "refused": h.Refused(), "bodies": h.Bodies(), "texts": h.Texts()}
			})
		}
		ts.Defer(func() { close(unblock); h.Server.Close() })
		ts.Setenv(name+"_URL", h.Server.URL)
	case "github", "gitlab", "gitea":
		if len(opts) != 2 || hang {
			ts.Fatalf("%s", usage)
		}
		f := notifytest.NewForge(typ, read(opts[0]), opts[1])
		f.Limit(limit)
		f.Changed = func(f *notifytest.Forge) {
			write(func() map[string]any {
				return map[string]any{"requests": len(f.Requests()), "refused": f.Refused(), "statuses": f.Statuses()}
			})
		}
		ts.Defer(f.Server.Close)
		ts.Setenv(name+"_URL", f.Server.URL)
	default:
		ts.Fatalf("%s", usage)
	}
	write(func() map[string]any { return map[string]any{"requests": 0} })
}

// cmdHMACSig prints, for each line of FILE, the signature a receiver
// computes for it as a body under the key in KEYFILE (its content without
// surrounding whitespace), as docs/notifications.md tells receivers to:
// "sha256=" and the hex of HMAC-SHA256(key, body). hmacsig KEYFILE FILE
func cmdHMACSig(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: hmacsig KEYFILE FILE")
	}
	key := []byte(strings.TrimSpace(ts.ReadFile(args[0])))
	var out strings.Builder
	for _, line := range strings.SplitAfter(ts.ReadFile(args[1]), "\n") {
		body, ok := strings.CutSuffix(line, "\n")
		if !ok {
			break
		}
		m := hmac.New(sha256.New, key)
		m.Write([]byte(body))
		out.WriteString("sha256=" + hex.EncodeToString(m.Sum(nil)) + "\n")
	}
	ts.Stdout().Write([]byte(out.String()))
}
