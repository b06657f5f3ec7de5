package fleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cortex-sync/cortex-sync/internal/etcdtest"
)

// put writes a raw value at a key of c's fleet (parts below its prefix),
// as any member of any version, or of bad intent, may.
func put(t testing.TB, c *Client, value string, parts ...string) {
	t.Helper()
	if _, err := c.cli.Put(context.Background(), c.key(parts...), value); err != nil {
		t.Fatal(err)
	}
}

func ignoredKey(ig []Ignored, key string) *Ignored {
	for i := range ig {
		if ig[i].Key == key {
			return &ig[i]
		}
	}
	return nil
}

// An empty rollout: recorded by another host ({} — garbage, or another
// version naming its fields differently) is defaulted exactly as one in
// fleet.yaml: a threshold of 1 and a budget of 1, not 0 and 0 (which
// paused the rollout of a revision no host had even tried). Each host
// goes by the revision's own rollout: (here the same as {}'s defaults);
// the recorded one is what fleet status shows.
func TestEmptyRecordedSpecTakesDefaults(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c := dial(t, cl.Endpoints())
	rev := Revision{ID: "main@sha1:empty", Rollout: rollout("1", 0, 1, 0)}
	put(t, c, `{"revision":"main@sha1:empty","rollout":{},"by":"elsewhere","at":"2026-01-01T00:00:00Z"}`, "rollout", revKey(rev.ID), "spec")
	s := &sim{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() {
			if !s.apply(ctx, m, rev, false) {
				t.Errorf("%s never got through", m.Host())
			}
		})
	}
	wg.Wait()
	if s.peak != 1 {
		t.Errorf("peak in transition %d: maxUnavailable is 1", s.peak)
	}
	ro := read(t, c, "").Rollouts[0]
	if ro.State != StateComplete || len(ro.Good) != 3 || ro.MaxUnavailable != "1" {
		t.Fatalf("rollout %+v", ro)
	}
}

// A recorded spec that does not pass (a field this version does not
// know, a negative threshold, not JSON) is ignored with a reason that
// fleet status and the host show; the host goes by its own fleet.yaml,
// and records its own with its slot.
func TestInvalidRecordedSpecIgnored(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	for i, tt := range []struct{ value, why string }{
		{`{"revision":"main@sha1:1","rollout":{"maxUnavail":"50%"}}`, `unknown field "maxUnavail"`},
		{`{"revision":"main@sha1:1","rollout":{"failureThreshold":-1}}`, "failureThreshold must be 1 or more"},
		{`{"revision":"main@sha1:1","rollout":{"maxUnavailable":"0"}}`, "is neither a count"},
		{`not json`, "is not a JSON object"},
		{`{"revision":"main@sha1:2","rollout":{}}`, `names revision "main@sha1:2", not its key's`},
	} {
		t.Run(string(rune('a'+i)), func(t *testing.T) {
			ms := hosts(t, cl, 2)
			c := dial(t, cl.Endpoints())
			rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
			key := "rollout/" + revKey(rev.ID) + "/spec"
			put(t, c, tt.value, key)
			r := read(t, c, "")
			ig := ignoredKey(r.Ignored, key)
			if ig == nil || !strings.Contains(ig.Why, tt.why) || !strings.Contains(ig.Why, "own fleet.yaml") {
				t.Fatalf("ignored %+v, want %s: %s", r.Ignored, key, tt.why)
			}
			if len(r.Rollouts) != 1 || r.Rollouts[0].State != StateUnknown || !strings.Contains(r.Rollouts[0].Why, tt.why) {
				t.Fatalf("rollouts %+v", r.Rollouts)
			}
			d, err := ms[0].Admit(context.Background(), rev)
			if err != nil || !d.Go {
				t.Fatalf("admit under the host's own rollout: %+v %v", d, err)
			}
			if ig := ignoredKey(ms[0].Ignored(), key); ig == nil || !strings.Contains(ig.Why, tt.why) {
				t.Fatalf("the host does not report the ignored spec: %+v", ms[0].Ignored())
			}
			if d, _ := ms[1].Admit(context.Background(), rev); d.Go || d.Wait != WaitSlot {
				t.Fatalf("a second host under the host's own maxUnavailable 1: %+v", d)
			}
			r = read(t, c, "")
			if len(r.Ignored) != 0 || r.Rollouts[0].State != StateProgressing || r.Rollouts[0].StartedBy != "h00" {
				t.Fatalf("the spec is not recorded anew by the host that took a slot: %+v %+v", r.Ignored, r.Rollouts)
			}
		})
	}
}

// Two versions share a fleet during an upgrade: a record of a newer
// schema is ignored by name (and not overwritten), one of an older schema
// (before the field existed) is read; a slot of a newer schema still
// counts, as its key lives on its holder's lease.
func TestNewerSchemaIgnoredByName(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("2", 0, 1, 0)}
	// The hosts' first status is written before the test's own, not over it.
	waitFor(t, 5*time.Second, "the hosts' first status", func() bool {
		r := read(t, c, "")
		return row(r, "h01") != nil && !row(r, "h01").Time.IsZero() && row(r, "h02") != nil && !row(r, "h02").Time.IsZero()
	})
	newer := `{"schema":4,"revision":"main@sha1:1","rollout":{"maxUnavailable":"3"},"window":"sat"}`
	specKey := "rollout/" + revKey(rev.ID) + "/spec"
	put(t, c, newer, specKey)
	put(t, c, `{"schema":4,"host":"h01","revision":"main@sha1:0","sync":"Synced","health":"Healthy","zone":"b"}`, "status", "h01")
	put(t, c, `{"host":"h02","revision":"main@sha1:0","sync":"Synced","health":"Healthy","time":"2026-01-01T00:00:00Z"}`, "status", "h02")
	// h01 holds a slot in a newer schema, on its lease.
	lease, err := c.cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cli.Put(ctx, c.key("slot", "0"), `{"schema":4,"host":"h01","revision":"main@sha1:1","at":"2026-01-01T00:00:00Z","wave":1}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	r := read(t, c, "")
	for _, key := range []string{specKey, "status/h01", "slot/0"} {
		if ig := ignoredKey(r.Ignored, key); ig == nil || !strings.Contains(ig.Why, "written by a newer cortex-sync (schema 4; this one reads up to 3)") {
			t.Errorf("%s: ignored %+v", key, r.Ignored)
		}
	}
	if h := row(r, "h02"); h == nil || h.Revision != "main@sha1:0" {
		t.Errorf("a status of the older schema (no schema field) is not read: %+v", r.Hosts)
	}
	if h := row(r, "h01"); h == nil || h.Revision != "" {
		t.Errorf("a status of a newer schema is read: %+v", h)
	}
	// The host goes by its own rollout (maxUnavailable 2): h01's slot
	// counts, so one more may go, not two.
	if d, err := ms[0].Admit(ctx, rev); err != nil || !d.Go {
		t.Fatalf("admit: %+v %v", d, err)
	}
	if d, _ := ms[2].Admit(ctx, rev); d.Go {
		t.Fatalf("a third host in transition with maxUnavailable 2 (the newer slot not counted): %+v", d)
	}
	resp, err := c.cli.Get(ctx, c.key(specKey))
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != newer {
		t.Fatalf("the newer spec was overwritten: %v %s", err, resp.Kvs[0].Value)
	}
	if _, err := c.SetRollout(ctx, rev.ID, StateActive, "ops", ""); !errors.Is(err, ErrNothingToResume) || !strings.Contains(err.Error(), "written by a newer cortex-sync") {
		t.Fatalf("resume of a rollout this version cannot read: %v", err)
	}
}

// resume never says it moved a rollout it cannot move.
func TestResumeNothingToResume(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 2)
	c := dial(t, cl.Endpoints())
	ctx := context.Background()
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	if d, _ := ms[0].Admit(ctx, rev); !d.Go {
		t.Fatal(d)
	}
	if _, err := c.SetRollout(ctx, "", StateActive, "ops", ""); !errors.Is(err, ErrNothingToResume) || !strings.Contains(err.Error(), "is progressing") {
		t.Fatalf("resume of a progressing rollout: %v", err)
	}
	for _, m := range ms {
		if m != ms[0] && !waitAdmit(ctx, m, rev) {
			t.Fatal("no slot")
		}
		if err := m.Good(ctx, rev.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.SetRollout(ctx, "", StateActive, "ops", ""); !errors.Is(err, ErrNothingToResume) || !strings.Contains(err.Error(), "is complete") {
		t.Fatalf("resume of a complete rollout: %v", err)
	}
	// Progressing, but a failure uses up the budget (maxUnavailable 1,
	// threshold 2): resume forgives it, and the next host goes.
	rev3 := Revision{ID: "main@sha1:3", Rollout: rollout("1", 0, 2, 0)}
	if !waitAdmit(ctx, ms[0], rev3) {
		t.Fatal("no slot")
	}
	if err := ms[0].Bad(ctx, rev3.ID, "readiness failed"); err != nil {
		t.Fatal(err)
	}
	if d, _ := ms[1].Admit(ctx, rev3); d.Go || d.Wait != WaitSlot {
		t.Fatalf("the failure does not use up the budget: %+v", d)
	}
	if _, err := c.SetRollout(ctx, rev3.ID, StateActive, "ops", ""); err != nil {
		t.Fatalf("resume of a rollout whose failure uses up its budget: %v", err)
	}
	if d, err := ms[1].Admit(ctx, rev3); err != nil || !d.Go {
		t.Fatalf("after resume: %+v %v", d, err)
	}
	// A spec that does not pass, under a pause: resumed, and the spec
	// removed so that the next host records its own.
	rev2 := Revision{ID: "main@sha1:2", Rollout: rollout("1", 0, 1, 0)}
	put(t, c, `{"revision":"main@sha1:2","rollout":{"canary":-3}}`, "rollout", revKey(rev2.ID), "spec")
	if _, err := c.SetRollout(ctx, rev2.ID, StatePaused, "ops", "look"); err != nil {
		t.Fatal(err)
	}
	if d, _ := ms[1].Admit(ctx, rev2); d.Go {
		t.Fatalf("paused: %+v", d)
	}
	if _, err := c.SetRollout(ctx, rev2.ID, StateActive, "ops", ""); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if d, err := ms[1].Admit(ctx, rev2); err != nil || !d.Go {
		t.Fatalf("resumed: %+v %v", d, err)
	}
	if r := read(t, c, ""); len(r.Ignored) != 0 {
		t.Fatalf("still ignored: %+v", r.Ignored)
	}
}

// A host bounds what it writes, so that no reader ignores its status as
// too large: a 1 MB error is cut, and the row is read.
func TestStatusBoundedWhenWritten(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	a := join(t, cl.Endpoints(), "a", nil)
	c := dial(t, cl.Endpoints())
	fighting := make([]string, 500)
	for i := range fighting {
		fighting[i] = "File/" + strings.Repeat("f", 200)
	}
	a.SetStatus(HostStatus{Revision: "r1", LastError: strings.Repeat("e", 1<<20), Fighting: fighting})
	waitFor(t, 5*time.Second, "status read", func() bool { h := row(read(t, c, ""), "a"); return h != nil && h.Revision == "r1" })
	r := read(t, c, "")
	if h := row(r, "a"); len(h.LastError) > maxTextBytes+4 || len(h.Fighting) != maxListed+1 || len(r.Ignored) != 0 {
		t.Fatalf("error of %d bytes, %d fighting, ignored %v", len(h.LastError), len(h.Fighting), r.Ignored)
	}
}

// The reason a record is ignored never carries what it holds raw: a
// field name with escapes, 60 KB long, is cleaned and cut.
func TestIgnoredReasonPrinted(t *testing.T) {
	_, err := decode[slotDoc]([]byte(`{"revision":"r","at":"2026-01-01T00:00:00Z","\u001b[2J` + strings.Repeat("x", 60<<10) + `":1}`))
	if err == nil || strings.ContainsRune(err.Error(), 0x1b) || len(err.Error()) > 400 || !strings.Contains(err.Error(), `unknown field "`) {
		t.Fatalf("decode: %.500v", err)
	}
}

// TestForgedRecordedSpecIgnored: a member writes a well-formed spec that
// differs from the revision's own rollout: (maxUnavailable 100%, no
// canary). Every host reads that rollout: from Git, so each goes by its
// own, and says it ignored the recorded one: one host at a time still.
func TestForgedRecordedSpecIgnored(t *testing.T) {
	t.Parallel() // on the shared cluster, in a fleet of its own
	cl := etcdtest.Shared(t)
	ms := hosts(t, cl, 3)
	c := dial(t, cl.Endpoints())
	rev := Revision{ID: "main@sha1:1", Rollout: rollout("1", 0, 1, 0)}
	key := "rollout/" + revKey(rev.ID) + "/spec"
	put(t, c, `{"schema":1,"revision":"main@sha1:1","rollout":{"maxUnavailable":"100%","canary":0,"failureThreshold":3},"by":"h01","at":"2026-12-06T07:00:00Z"}`, key)
	ctx := context.Background()
	if d, err := ms[0].Admit(ctx, rev); err != nil || !d.Go {
		t.Fatalf("the first host: %+v %v", d, err)
	}
	if ig := ignoredKey(ms[0].Ignored(), key); ig == nil || !strings.Contains(ig.Why, "differs from the rollout: of main@sha1:1's own fleet.yaml") {
		t.Fatalf("the host does not report the forged spec: %+v", ms[0].Ignored())
	}
	for _, m := range ms[1:] {
		if d, _ := m.Admit(ctx, rev); d.Go || d.Wait != WaitSlot {
			t.Fatalf("another host under the revision's own maxUnavailable 1, the forged spec saying 100%%: %+v", d)
		}
	}
}
