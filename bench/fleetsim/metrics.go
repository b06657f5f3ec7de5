package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The etcd v3.7.3 metrics the simulator reads from each member's /metrics
// (names checked by scraping a member of that version).
const (
	// A gauge: the member's raft commit index. Every member commits the
	// same log, so each one's delta is the cluster's proposals, a follower's
	// lagging by a few; the largest delta is the leader's while it leads,
	// and still the whole log's when the leader changed meanwhile.
	mProposals = "etcd_server_proposals_committed_total"
	// Events the member's watchers sent to their clients: summed, as a
	// watcher lives on one member.
	mEvents = "etcd_debugging_mvcc_events_total"
	// Bytes of every gRPC reply the member sent to its clients (ranges,
	// transactions, watch events, keep-alive replies): summed.
	mSentBytes = "etcd_network_client_grpc_sent_bytes_total"
	// Leases the leader expired: summed (only the leader counts them).
	mLeaseExpired = "etcd_debugging_server_lease_expired_total"
	// Keep-alive messages received on lease streams: summed.
	mKeepAlives = `grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"}`
	// Watchers open on the member (a gauge): summed.
	mWatchers = "etcd_debugging_mvcc_watcher_total"
	mRSS      = "process_resident_memory_bytes"
	mHeap     = "go_memstats_heap_inuse_bytes"
	mCPU      = "process_cpu_seconds_total"
	mLeader   = "etcd_server_is_leader"
)

var wanted = []string{mProposals, mEvents, mSentBytes, mLeaseExpired, mKeepAlives, mWatchers, mRSS, mHeap, mCPU, mLeader}

// scrape is one read of every member's metrics: url → metric → value.
type scrape struct {
	at      time.Time
	members []map[string]float64
	proxies []map[string]float64 // the gRPC proxies', when asked for
}

// proxy is the scrape of the proxies alone.
func (s scrape) proxy() scrape { return scrape{at: s.at, members: s.proxies} }

// scrapeAll reads the wanted metrics of each URL's /metrics: etcd
// members', or (members false) gRPC proxies'.
func scrapeAll(ctx context.Context, urls []string, members bool) (scrape, error) {
	s := scrape{at: time.Now(), members: make([]map[string]float64, len(urls))}
	for i, u := range urls {
		m, err := scrapeOne(ctx, u, members)
		if err != nil {
			return s, err
		}
		s.members[i] = m
	}
	return s, nil
}

func scrapeOne(ctx context.Context, base string, member bool) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := strings.TrimSuffix(base, "/") + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics URL %q: %w", base, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read %s: %s (an etcd member's client or metrics URL?)", u, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		for _, w := range wanted {
			if name == w {
				if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
					out[name] = v
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	if _, ok := out[mProposals]; member && !ok {
		return nil, fmt.Errorf("%s has no %s: not an etcd member (a gRPC proxy's? give the members' URLs in -metrics-urls)", u, mProposals)
	}
	return out, nil
}

// sum is the metric summed over the members.
func (s scrape) sum(name string) float64 {
	var t float64
	for _, m := range s.members {
		t += m[name]
	}
	return t
}

// delta is the metric's change from a to b, summed over the members.
func delta(a, b scrape, name string) float64 { return b.sum(name) - a.sum(name) }

// maxDelta is the largest change of the metric on one member.
func maxDelta(a, b scrape, name string) float64 {
	var d float64
	for i := range b.members {
		if i < len(a.members) {
			d = max(d, b.members[i][name]-a.members[i][name])
		}
	}
	return d
}

// leader is the index of the member that said it leads, or -1.
func (s scrape) leader() int {
	for i, m := range s.members {
		if m[mLeader] == 1 {
			return i
		}
	}
	return -1
}

// each is the metric on every member, formatted by f.
func (s scrape) each(name string, f func(float64) string) string {
	parts := make([]string, len(s.members))
	for i, m := range s.members {
		parts[i] = f(m[name])
	}
	return strings.Join(parts, " / ")
}

func mib(v float64) string { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
