package agent

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// ControlHeader is the header a control request carries (with any value,
// "1" by convention) when it has no bearer token and no JSON body: a web
// page cannot send it to another site without a CORS preflight, which the
// agent never grants. The CLI always sends it.
const ControlHeader = "X-Cortex-Sync"

// guard is the one door every request to the server goes through: a route
// cannot be added beside it. Loopback is no boundary against a browser on
// the same host: a page it shows can send "simple" cross-site requests to
// 127.0.0.1, and can rebind a name of its own to 127.0.0.1 to read the
// answers. So, before any handler:
//
//   - every request names this agent in its Host (hosts): a page that
//     rebound its own name is refused, reads included;
//   - every request that is not a read (any method but GET and HEAD) is a
//     control request: it is refused when a browser says it comes from
//     another site (Origin, Sec-Fetch-Site), when it is one a page could
//     send without a preflight (no ControlHeader, no bearer token and no
//     JSON body), and, with a token file, without the bearer token.
//
// The signed paths (the push webhook) answer for themselves: their HMAC,
// which a page cannot forge, is their authentication, and they are
// commonly reached through a proxy under a public name.
type guard struct {
	next   http.Handler
	hosts  hostSet
	signed map[string]bool // paths
	s      *Server
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.signed[r.URL.Path] {
		g.next.ServeHTTP(w, r)
		return
	}
	if !g.hosts.allows(r.Host) {
		g.s.log.Warn("http request refused", "reason", "host", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
		writeText(w, http.StatusMisdirectedRequest, fmt.Sprintf(
			"refused: Host %q is not this agent's address (%s): a web page that rebinds its own name to this host sends that; ask for %s, or localhost, instead",
			r.Host, g.hosts.listen, g.hosts.listen))
		return
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		g.next.ServeHTTP(w, r)
		return
	}
	if why := crossSite(r); why != "" {
		g.s.log.Warn("control request refused", "reason", "cross-site", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "refused: this request comes from a web page of another site (" + why + "), and a page may not drive the agent; use the cortex-sync CLI, or a client that is not a browser"})
		return
	}
	if !preflighted(r) {
		g.s.log.Warn("control request refused", "reason", "simple request", "path", r.URL.Path, "remote", r.RemoteAddr)
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "refused: a control request needs the header " + ControlHeader + ": 1 (or a bearer token, or Content-Type: application/json), which a web page cannot send to another site; the cortex-sync CLI sends it"})
		return
	}
	if !g.s.authorized(w, r) {
		return
	}
	g.next.ServeHTTP(w, r)
}

// crossSite says why r comes from a page of another site, "" when nothing
// says so. Sec-Fetch-Site is the browser's own verdict; Origin, sent by
// older ones too, is compared with the Host (already one of this agent's).
// A client that is not a browser sends neither.
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site is " + site
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || !strings.EqualFold(u.Host, r.Host) {
		return "Origin " + origin + " is not this agent's"
	}
	return ""
}

// preflighted says whether r is one a browser sends to another site only
// after a CORS preflight (which is never granted here): it carries
// ControlHeader, an Authorization header, or a JSON body type.
func preflighted(r *http.Request) bool {
	if r.Header.Get(ControlHeader) != "" || r.Header.Get("Authorization") != "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// hostSet is the names a request's Host may give for an agent listening on
// listen, any port (a tunnel or a forward may change it):
//   - on loopback: localhost, any loopback address, and the listen host;
//   - on one address beyond loopback: those, and the machine's host name
//     (a scraper elsewhere asks for the address or the name);
//   - on every address (0.0.0.0, [::], or no host): any, as the host is
//     reached under every name and address it has; a DNS-rebinding page
//     aims at what only loopback reaches, and beyond loopback the control
//     requests need the bearer token anyway.
type hostSet struct {
	listen string // the listen address, for messages
	any    bool
	names  map[string]bool // lower case, no brackets, no trailing dot
}

// newHostSet is the set for an agent told to listen on addr (its host as
// given: a name stays a name) and listening on bound.
func newHostSet(addr string, bound net.Addr) hostSet {
	hs := hostSet{listen: bound.String(), names: map[string]bool{"localhost": true}}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return hs
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		hs.any = true
		return hs
	}
	hs.names[canonHost(host)] = true
	if ta, ok := bound.(*net.TCPAddr); ok {
		hs.names[ta.IP.String()] = true
	}
	if loopback, _ := isLoopback(addr); !loopback {
		if name, err := os.Hostname(); err == nil && name != "" {
			hs.names[canonHost(name)] = true
		}
	}
	return hs
}

// allows says whether a request's Host names this agent.
func (hs hostSet) allows(hostport string) bool {
	if hs.any {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = canonHost(host)
	if host == "" {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return hs.names[host]
}

// canonHost is a host as compared: lower case, without the brackets of an
// IPv6 literal and a fully qualified name's trailing dot.
func canonHost(h string) string {
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}
