package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-endpoints"},
		{[]string{"-endpoints", "http://a:1", "-hosts", "0"}, "-hosts 0"},
		{[]string{"-endpoints", "http://a:1", "-max-unavailable", "150%"}, "-max-unavailable"},
		{[]string{"-endpoints", "http://a:1", "-rollouts", "0"}, "-rollouts 0"},
		{[]string{"-endpoints", "http://a:1", "-apply", "-1s"}, "-apply -1s"},
		{[]string{"-endpoints", "http://a:1", "extra"}, "unexpected arguments"},
	} {
		_, err := parse(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse %q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
	o, err := parse([]string{"-endpoints", "http://a:1, http://b:2", "-hosts", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.endpoints) != 2 || o.metricsURLs[1] != "http://b:2" || o.hosts != 7 {
		t.Errorf("parsed %+v", o)
	}
}

const memberMetrics = `# HELP etcd_server_proposals_committed_total The total number of consensus proposals committed.
# TYPE etcd_server_proposals_committed_total gauge
etcd_server_proposals_committed_total 1234
etcd_debugging_mvcc_events_total 55
etcd_server_is_leader 1
grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"} 9
grpc_server_msg_received_total{grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 1000
process_resident_memory_bytes 3.2e+07
`

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, memberMetrics)
	}))
	defer srv.Close()
	s, err := scrapeAll(context.Background(), []string{srv.URL, srv.URL + "/"}, true)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{mProposals: 2468, mEvents: 110, mKeepAlives: 18, mRSS: 6.4e7} {
		if got := s.sum(name); got != want {
			t.Errorf("%s summed: %v, want %v", name, got, want)
		}
	}
	if s.leader() != 0 {
		t.Errorf("leader %d, want 0", s.leader())
	}

	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "process_resident_memory_bytes 1e+07\n")
	}))
	defer proxy.Close()
	if _, err := scrapeAll(context.Background(), []string{proxy.URL}, true); err == nil || !strings.Contains(err.Error(), "-metrics-urls") {
		t.Errorf("a proxy's metrics taken for a member's: %v", err)
	}
	if p, err := scrapeAll(context.Background(), []string{proxy.URL}, false); err != nil || p.sum(mRSS) != 1e7 {
		t.Errorf("a proxy's metrics: %v, %v", p, err)
	}
}
