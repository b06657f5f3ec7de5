package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

// Probe checks a process: a command, an HTTP GET or a TCP connect, with
// Kubernetes' timing fields and defaults.
type Probe struct {
	Exec             *ExecProbe        `yaml:"exec" json:"exec,omitempty"`
	HTTP             *HTTPProbe        `yaml:"http" json:"http,omitempty"`
	TCP              *TCPProbe         `yaml:"tcp" json:"tcp,omitempty"`
	InitialDelay     resource.Duration `yaml:"initialDelay" json:"initialDelay,omitempty"`
	Period           resource.Duration `yaml:"period" json:"period,omitempty"`                     // default 10s
	Timeout          resource.Duration `yaml:"timeout" json:"timeout,omitempty"`                   // default 1s
	FailureThreshold int               `yaml:"failureThreshold" json:"failureThreshold,omitempty"` // default 3
	SuccessThreshold int               `yaml:"successThreshold" json:"successThreshold,omitempty"` // default 1
}

// ExecProbe succeeds when the command exits 0.
type ExecProbe struct {
	Command []string `yaml:"command" json:"command"`
}

// HTTPProbe succeeds on a status of 200-399, or exactly ExpectStatus.
type HTTPProbe struct {
	URL          string `yaml:"url" json:"url"`
	ExpectStatus int    `yaml:"expectStatus" json:"expectStatus,omitempty"`
}

// TCPProbe succeeds when a connection opens.
type TCPProbe struct {
	Address string `yaml:"address" json:"address"`
}

// Validate checks a probe's fields under field ("spec.livenessProbe").
func (p *Probe) Validate(v *resource.Validation, field string) {
	n := 0
	if p.Exec != nil {
		n++
		if len(p.Exec.Command) == 0 {
			v.Errorf(field+".exec.command", "is required")
		}
	}
	if p.HTTP != nil {
		n++
		if u, err := url.Parse(p.HTTP.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.Errorf(field+".http.url", "%q must be an http:// or https:// URL", p.HTTP.URL)
		}
	}
	if p.TCP != nil {
		n++
		if _, _, err := net.SplitHostPort(p.TCP.Address); err != nil {
			v.Errorf(field+".tcp.address", "%q must be host:port", p.TCP.Address)
		}
	}
	if n != 1 {
		v.Errorf(field, "give exactly one of exec, http or tcp")
	}
	if p.FailureThreshold < 0 || p.SuccessThreshold < 0 {
		v.Errorf(field, "thresholds must be positive")
	}
}

// Timing is a probe's timing with defaults filled in.
type Timing struct {
	InitialDelay, Period, Timeout      time.Duration
	FailureThreshold, SuccessThreshold int
}

// Timing fills in the defaults: period 10s, timeout 1s, failure threshold
// 3, success threshold 1.
func (p *Probe) Timing() Timing {
	t := Timing{
		InitialDelay: p.InitialDelay.Std(), Period: p.Period.Std(), Timeout: p.Timeout.Std(),
		FailureThreshold: p.FailureThreshold, SuccessThreshold: p.SuccessThreshold,
	}
	if t.Period <= 0 {
		t.Period = 10 * time.Second
	}
	if t.Timeout <= 0 {
		t.Timeout = time.Second
	}
	if t.FailureThreshold <= 0 {
		t.FailureThreshold = 3
	}
	if t.SuccessThreshold <= 0 {
		t.SuccessThreshold = 1
	}
	return t
}

// Runner runs an exec probe's command and returns its output (the tail
// is enough) and how it failed; it runs it the way the process runs: as
// its user, with its environment and PATH, in its directory.
type Runner func(ctx context.Context, argv []string) ([]byte, error)

// String names the probe for messages: "exec [test -f /ready]",
// "http GET http://127.0.0.1:8080/healthz", "tcp 127.0.0.1:8080".
func (p *Probe) String() string {
	switch {
	case p.Exec != nil:
		return fmt.Sprintf("exec %q", p.Exec.Command)
	case p.HTTP != nil:
		return "http GET " + p.HTTP.URL
	case p.TCP != nil:
		return "tcp " + p.TCP.Address
	}
	return "empty probe"
}

// Check runs the probe once, within its timeout; run runs exec probes.
func (p *Probe) Check(ctx context.Context, run Runner) error {
	timeout := p.Timing().Timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := p.check(ctx, run)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out after %s", timeout)
	}
	return err
}

func (p *Probe) check(ctx context.Context, run Runner) error {
	switch {
	case p.Exec != nil:
		out, err := run(ctx, p.Exec.Command)
		if err != nil {
			if t := strings.TrimSpace(tail(out, 200)); t != "" {
				return fmt.Errorf("%v: %s", err, t)
			}
			return err
		}
		return nil
	case p.HTTP != nil:
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.HTTP.URL, nil)
		if err != nil {
			return err
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				return ue.Err
			}
			return err
		}
		resp.Body.Close()
		ok := resp.StatusCode >= 200 && resp.StatusCode < 400
		if p.HTTP.ExpectStatus != 0 {
			ok = resp.StatusCode == p.HTTP.ExpectStatus
		}
		if !ok {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	case p.TCP != nil:
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", p.TCP.Address)
		if err != nil {
			return err
		}
		return c.Close()
	}
	return errors.New("empty probe")
}

// probeClient never follows redirects (a 3xx is an answer) and keeps no
// connections: a probe must see a fresh connect.
var probeClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     &http.Transport{DisableKeepAlives: true, Proxy: nil},
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
