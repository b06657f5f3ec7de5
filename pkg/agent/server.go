package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cortex-sync/cortex-sync/pkg/events"
)

// DefaultAddr is where the agent listens unless told otherwise: loopback,
// so nothing is exposed by default.
const DefaultAddr = "127.0.0.1:9797"

// DefaultShutdownTimeout bounds a graceful shutdown of the server.
const DefaultShutdownTimeout = 5 * time.Second

// ServerOptions configure a Server. A nil callback leaves its endpoint
// answering 501, save Ready (nil: always ready).
type ServerOptions struct {
	Addr string // host:port; default DefaultAddr
	// Registry is served on /metrics; nil serves no /metrics.
	Registry *prometheus.Registry
	// Observe, when set, runs before each /metrics is gathered: the gauges
	// that are an observation of the host (resources by sync and health)
	// are taken when asked for, so their cost follows the scrapes rather
	// than every heal.
	Observe func(ctx context.Context)
	// Ready says whether the agent is ready (nil error) or why not.
	// /readyz answers 503 with the reason.
	Ready func(ctx context.Context) error
	// Degraded says what makes a ready agent work less well than it
	// should (directories unwatched for want of inotify watches): /readyz
	// answers 200 "ok, degraded: " and it. Nil or empty: just "ok".
	Degraded func(ctx context.Context) string
	// Status is the status document served as JSON on GET /api/v1/status.
	Status func(ctx context.Context) (any, error)
	// Events hands each event of the local log at or after since to each,
	// oldest first, then (follow) each new one until ctx ends: GET
	// /api/v1/events (events.go).
	Events func(ctx context.Context, since time.Time, follow bool, each func(events.Event) error) error
	// Fleet is the fleet as etcd knows it (fleet status -o json), served on
	// GET /api/v1/fleet; an error (etcd unreachable) answers 503.
	Fleet func(ctx context.Context) (any, error)
	// Reconcile asks for a reconcile now (POST /api/v1/reconcile, 202). It
	// must not wait for the reconcile: enqueue and return.
	Reconcile func(ctx context.Context) error
	// Suspend stops reconciling (POST /api/v1/suspend); Resume starts it
	// again and ends a rollback by hand (POST /api/v1/resume), answering
	// what it ended, or a conflict naming what holds the host.
	Suspend func(ctx context.Context) error
	Resume  func(ctx context.Context) (string, error)
	// Rollback applies an earlier revision and holds the host there
	// (POST /api/v1/rollback[?to=REV]); Retry applies a refused one
	// (POST /api/v1/retry). Each answers with the revision.
	Rollback func(ctx context.Context, to string) (string, error)
	Retry    func(ctx context.Context) (string, error)
	// TokenFile holds the bearer token every control request (any method
	// but GET and HEAD, the webhook aside) requires; read again whenever
	// it changes. Required to listen beyond loopback.
	TokenFile string
	// Webhook serves POST /hooks/git; nil serves no hook.
	Webhook *Webhook
	Logger  *slog.Logger
	// ShutdownTimeout bounds the graceful shutdown; default
	// DefaultShutdownTimeout. Connections still open then are closed.
	ShutdownTimeout time.Duration
}

// Server is the agent's HTTP server. NewServer binds its address, so that a
// busy port or a refused configuration fails at startup; Serve then serves
// until its context ends.
type Server struct {
	ln      net.Listener
	srv     *http.Server
	opts    ServerOptions
	token   *secretFile
	log     *slog.Logger
	timeout time.Duration
	// streams ends with a shutdown: an events follower is let go then,
	// rather than held until the shutdown's timeout.
	streams     context.Context
	stopStreams context.CancelFunc
}

// NewServer checks opts and listens on opts.Addr. Listening beyond loopback
// is refused without a TokenFile: anyone who can reach the port could
// otherwise trigger, suspend or resume reconciles. (A Webhook cannot exist
// without its secret, so the hook is never served unsigned.)
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	s := &Server{opts: opts, log: opts.Logger, timeout: cmpOr(opts.ShutdownTimeout, DefaultShutdownTimeout)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := checkAddr(opts.Addr, opts.TokenFile); err != nil {
		return nil, err
	}
	if opts.TokenFile != "" {
		var err error
		if s.token, err = newSecretFile(opts.TokenFile); err != nil {
			return nil, fmt.Errorf("tokenFile (--token-file): %w", err)
		}
	}
	s.srv = &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	var err error
	if s.ln, err = net.Listen("tcp", opts.Addr); err != nil {
		return nil, fmt.Errorf("listen (--listen): %w", err)
	}
	s.srv.Handler = s.routes()
	s.streams, s.stopStreams = context.WithCancel(context.Background())
	s.srv.RegisterOnShutdown(s.stopStreams)
	return s, nil
}

// CheckListen refuses what NewServer would refuse for addr, binding it for
// a moment: an agent stops on a bad address before it makes anything.
func CheckListen(addr, tokenFile string) error {
	if addr == "" {
		addr = DefaultAddr
	}
	if err := checkAddr(addr, tokenFile); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen (--listen): %w", err)
	}
	return ln.Close()
}

// checkAddr refuses to listen beyond loopback without a token: anyone who
// can reach the port could trigger, suspend or resume reconciles.
func checkAddr(addr, tokenFile string) error {
	loopback, err := isLoopback(addr)
	if err != nil {
		return fmt.Errorf("listen %q: %w", addr, err)
	}
	if tokenFile == "" && !loopback {
		return fmt.Errorf("listen %s reaches beyond loopback: set tokenFile (--token-file) so that reconcile, suspend and resume need a bearer token, or listen on %s", addr, DefaultAddr)
	}
	return nil
}

// isLoopback says whether addr only listens on loopback. An empty host,
// an unspecified address and any name but localhost count as beyond it.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// Addr is the address the server listens on (the real port when the
// option asked for port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx ends, then shuts down gracefully: in-flight
// requests get up to ShutdownTimeout, after which open connections are
// closed. It also stops the webhook's pending trigger. It returns nil after
// a shutdown and the error when serving fails.
func (s *Server) Serve(ctx context.Context) error {
	// Requests keep ctx's values but not its end: shutdown drains them.
	s.srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	s.log.Info("http listening", "addr", s.ln.Addr().String())
	defer func() {
		if s.opts.Webhook != nil {
			s.opts.Webhook.Close()
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		s.log.Warn("http shutdown incomplete, closing connections", "timeout", s.timeout, "error", err)
		s.srv.Close()
	}
	<-errc // http.ErrServerClosed
	return nil
}

// webhookPath is where the push webhook is served.
const webhookPath = "/hooks/git"

// routes is every endpoint, behind the guard: the one place that decides
// which requests reach a handler at all.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// The webhook's path is signed whether or not a hook is served: a push
	// to an agent without one is answered 404, not refused as a control.
	g := &guard{next: mux, hosts: newHostSet(s.opts.Addr, s.ln.Addr()), s: s, signed: map[string]bool{webhookPath: true}}
	if s.opts.Registry != nil {
		metrics := promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{
			ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
			Registry:      s.opts.Registry, // counts its own errors
			Timeout:       30 * time.Second,
			ErrorHandling: promhttp.ContinueOnError,
		})
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			if s.opts.Observe != nil {
				s.opts.Observe(r.Context())
			}
			metrics.ServeHTTP(w, r)
		})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeText(w, http.StatusOK, "ok") })
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /api/v1/status", func(w http.ResponseWriter, r *http.Request) {
		s.document(w, r, s.opts.Status, "status", http.StatusInternalServerError)
	})
	mux.HandleFunc("GET /api/v1/events", s.events)
	mux.HandleFunc("GET /api/v1/fleet", func(w http.ResponseWriter, r *http.Request) {
		s.document(w, r, s.opts.Fleet, "fleet", http.StatusServiceUnavailable)
	})
	mux.Handle("POST /api/v1/reconcile", s.control("reconcile", plain(s.opts.Reconcile, map[string]any{"status": "accepted"}), http.StatusAccepted, http.StatusServiceUnavailable))
	mux.Handle("POST /api/v1/suspend", s.control("suspend", plain(s.opts.Suspend, map[string]any{"suspended": true}), http.StatusOK, http.StatusServiceUnavailable))
	mux.Handle("POST /api/v1/resume", s.control("resume", says(s.opts.Resume, map[string]any{"suspended": false}), http.StatusOK, http.StatusConflict))
	mux.Handle("POST /api/v1/rollback", s.control("rollback", moves(s.opts.Rollback), http.StatusOK, http.StatusConflict))
	var retry func(context.Context, string) (string, error)
	if s.opts.Retry != nil {
		retry = func(ctx context.Context, _ string) (string, error) { return s.opts.Retry(ctx) }
	}
	mux.Handle("POST /api/v1/retry", s.control("retry", moves(retry), http.StatusOK, http.StatusConflict))
	if s.opts.Webhook != nil {
		mux.Handle(webhookPath, s.opts.Webhook) // answers 405 itself
	}
	return g
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.opts.Ready != nil {
		if err := s.opts.Ready(r.Context()); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
	}
	if s.opts.Degraded != nil {
		if why := s.opts.Degraded(r.Context()); why != "" {
			writeText(w, http.StatusOK, "ok, degraded: "+why)
			return
		}
	}
	writeText(w, http.StatusOK, "ok")
}

// document serves what fn makes as JSON; its failure is failCode.
func (s *Server) document(w http.ResponseWriter, r *http.Request, fn func(context.Context) (any, error), what string, failCode int) {
	if fn == nil {
		writeJSON(w, http.StatusNotImplemented, map[string]string{"error": "no " + what + " here"})
		return
	}
	doc, err := fn(r.Context())
	if err != nil {
		s.log.Error("document failed", "document", what, "error", err)
		writeJSON(w, failCode, map[string]string{"error": err.Error()})
		return
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		s.log.Error("document encoding failed", "document", what, "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "encoding the " + what + " failed"})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(buf.Bytes())
}

// control is a POST endpoint (the guard has checked who asks): fn does
// the work and says what to answer, with code; its error is answered
// failCode.
func (s *Server) control(name string, fn func(*http.Request) (map[string]any, error), code, failCode int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fn == nil {
			writeJSON(w, http.StatusNotImplemented, map[string]string{"error": name + " is not available here"})
			return
		}
		answer, err := fn(r)
		if err != nil {
			s.log.Warn("control request failed", "action", name, "error", err)
			writeJSON(w, failCode, map[string]string{"error": err.Error()})
			return
		}
		s.log.Info("control request", "action", name, "remote", r.RemoteAddr)
		writeJSON(w, code, answer)
	})
}

// plain is a control that answers the same each time.
func plain(fn func(context.Context) error, answer map[string]any) func(*http.Request) (map[string]any, error) {
	if fn == nil {
		return nil
	}
	return func(r *http.Request) (map[string]any, error) { return answer, fn(r.Context()) }
}

// says is a control that says what it did (a message beside answer's
// fields); one with nothing to do is a conflict.
func says(fn func(context.Context) (string, error), answer map[string]any) func(*http.Request) (map[string]any, error) {
	if fn == nil {
		return nil
	}
	return func(r *http.Request) (map[string]any, error) {
		msg, err := fn(r.Context())
		out := map[string]any{"message": msg}
		for k, v := range answer {
			out[k] = v
		}
		return out, err
	}
}

// moves is a control that moves the host to a revision (?to=REV, when fn
// takes one) and answers with it; one that cannot is a conflict.
func moves(fn func(context.Context, string) (string, error)) func(*http.Request) (map[string]any, error) {
	if fn == nil {
		return nil
	}
	return func(r *http.Request) (map[string]any, error) {
		rev, err := fn(r.Context(), r.URL.Query().Get("to"))
		return map[string]any{"revision": rev}, err
	}
}

// authorized checks the bearer token when a TokenFile is set, answering
// the request itself when it fails. The guard calls it for every control
// request.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.token == nil {
		return true
	}
	want, err := s.token.get()
	if err != nil {
		s.log.Error("token file unreadable", "error", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "token unavailable"})
		return false
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if ok && strings.EqualFold(scheme, "Bearer") && equalSecret([]byte(strings.TrimSpace(got)), want) {
		return true
	}
	s.log.Warn("control request unauthorized", "path", r.URL.Path, "remote", r.RemoteAddr)
	w.Header().Set("WWW-Authenticate", `Bearer realm="cortex-sync"`)
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "a valid bearer token is required"})
	return false
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, msg)
}
