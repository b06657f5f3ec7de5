package events_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/events"
	"github.com/cortex-sync/cortex-sync/pkg/state"
)

func ev(i int) events.Event {
	return events.Event{Time: time.Unix(1_700_000_000+int64(i), 0).UTC(), Host: "web1", Severity: events.Info,
		Reason: events.DriftCorrected, Resource: fmt.Sprintf("File/f%d", i), Message: fmt.Sprintf("event %d", i)}
}

func openLog(t testing.TB, dir string, opts events.LogOptions) *events.Log {
	t.Helper()
	l, err := events.OpenLog(state.At(dir), opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func readAll(t *testing.T, dir string, since time.Time) []events.Event {
	t.Helper()
	got, err := events.Read(state.At(dir), since)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// emitAll emits n events one by one, each once the writer took the one
// before (the queue never fills).
func emitAll(l *events.Log, from, n int) {
	for i := from; i < from+n; i++ {
		l.Emit(ev(i))
	}
}

func TestLogWritesReadsAndKeeps0600(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, events.LogOptions{})
	emitAll(l, 0, 10)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, events.LogFile))
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("%s is %v, want 0600", events.LogFile, perm)
	}
	got := readAll(t, dir, time.Time{})
	if len(got) != 10 {
		t.Fatalf("read %d events, want 10", len(got))
	}
	for i, e := range got {
		if e != ev(i) {
			t.Errorf("event %d: %+v, want %+v", i, e, ev(i))
		}
	}
	if got := readAll(t, dir, ev(7).Time); len(got) != 3 || got[0] != ev(7) {
		t.Errorf("since event 7: %v", got)
	}
}

func TestLogMakesAWiderFile0600(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, events.LogFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, dir, events.LogOptions{})
	l.Close()
	fi, _ := os.Stat(filepath.Join(dir, events.LogFile))
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("%s left %v, want 0600", events.LogFile, perm)
	}
}

func TestLogRotatesWithinItsBound(t *testing.T) {
	dir := t.TempDir()
	const max = 2048
	l := openLog(t, dir, events.LogOptions{MaxBytes: max, Queue: 10_000})
	const n = 500 // about 100 KiB of events: many rotations
	emitAll(l, 0, n)
	l.Close()
	var total int64
	for _, name := range []string{events.LogFile, events.LogOldFile} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > max {
			t.Errorf("%s is %d bytes, over its bound %d", name, fi.Size(), max)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s is %v, want 0600", name, perm)
		}
		total += fi.Size()
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the state dir holds %d files, want the 2 of the log", len(entries))
	}
	got := readAll(t, dir, time.Time{})
	if len(got) == 0 || got[len(got)-1] != ev(n-1) {
		t.Fatalf("the newest event is not last: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if !got[i].Time.After(got[i-1].Time) {
			t.Fatalf("events out of order or repeated at %d: %v then %v", i, got[i-1], got[i])
		}
	}
	// What is kept is the newest, without a gap.
	first := got[0]
	if want := ev(n - len(got)); first != want {
		t.Errorf("the oldest kept is %v, want %v (a gap)", first, want)
	}
}

func TestLogConcurrentWritersKeepWholeLines(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, events.LogOptions{Queue: 10_000})
	var wg sync.WaitGroup
	const writers, each = 8, 200
	for w := range writers {
		wg.Go(func() { emitAll(l, w*each, each) })
	}
	wg.Wait()
	l.Close()
	got := readAll(t, dir, time.Time{})
	if len(got) != writers*each {
		t.Fatalf("read %d events, want %d", len(got), writers*each)
	}
	seen := map[string]bool{}
	for _, e := range got {
		seen[e.Resource] = true
	}
	if len(seen) != writers*each {
		t.Errorf("%d distinct events, want %d", len(seen), writers*each)
	}
	data, _ := os.ReadFile(filepath.Join(dir, events.LogFile))
	if lines := strings.Count(string(data), "\n"); lines != writers*each {
		t.Errorf("%d lines, want %d", lines, writers*each)
	}
}

func TestLogDropsWhenFullAndCounts(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	dropped := 0
	l := openLog(t, dir, events.LogOptions{Queue: 1, Dropped: func() { mu.Lock(); dropped++; mu.Unlock() }})
	const n = 20_000
	emitAll(l, 0, n) // far faster than the writer: the queue of 1 fills (an Emit that waited for the writer would drop none)
	l.Close()
	got := len(readAll(t, dir, time.Time{}))
	mu.Lock()
	defer mu.Unlock()
	if dropped == 0 || int64(dropped) != l.Dropped() {
		t.Errorf("dropped %d (Dropped says %d), want some, counted the same", dropped, l.Dropped())
	}
	if got+dropped != n {
		t.Errorf("%d written + %d dropped != %d emitted", got, dropped, n)
	}
	l.Emit(ev(0)) // closed: neither a panic nor a write
}

func TestLogTornLineSkippedThenCut(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, events.LogOptions{})
	emitAll(l, 0, 3)
	l.Close()
	file := filepath.Join(dir, events.LogFile)
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2023-11-14T22:13:23Z","host":"web1","severity":"info","reason":"Dri`) // a crash mid-write
	f.Close()
	if got := readAll(t, dir, time.Time{}); len(got) != 3 {
		t.Fatalf("with a torn last line: read %d events, want the 3 whole ones", len(got))
	}
	// The next writer cuts the torn line: the next event is whole.
	l = openLog(t, dir, events.LogOptions{})
	emitAll(l, 3, 1)
	l.Close()
	got := readAll(t, dir, time.Time{})
	if len(got) != 4 || got[3] != ev(3) {
		t.Fatalf("after a restart: %v, want the 3 events and the new one", got)
	}
	data, _ := os.ReadFile(file)
	if strings.Contains(string(data), `"reason":"Dri"`) || strings.Contains(string(data), `"Dri{`) {
		t.Errorf("the torn line is still in the log:\n%s", data)
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, events.LogOptions{MaxBytes: 4096, Queue: 10_000})
	emitAll(l, 0, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan events.Event, 1000)
	done := make(chan error, 1)
	go func() {
		done <- events.Follow(ctx, state.At(dir), time.Time{}, 5*time.Millisecond, func(e events.Event) error {
			got <- e
			return nil
		})
	}()
	const n = 150 // a few rotations of 4 KiB
	for i := 2; i < n; i++ {
		l.Emit(ev(i))
		time.Sleep(2 * time.Millisecond) // slower than a rotation, as events come
	}
	deadline := time.After(10 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case e := <-got:
			if e != ev(i) {
				t.Fatalf("followed %v, want %v", e, ev(i))
			}
		case <-deadline:
			t.Fatalf("followed %d events of %d", i, n)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l.Close()
}

func TestReadWithoutLog(t *testing.T) {
	if got := readAll(t, t.TempDir(), time.Time{}); len(got) != 0 {
		t.Errorf("no log: %v", got)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "", want: time.Time{}},
		{in: "1h", want: now.Add(-time.Hour)},
		{in: "2026-12-06T09:30:00Z", want: now.Add(-30 * time.Minute)},
		{in: "-1h", bad: true},
		{in: "yesterday", bad: true},
	} {
		got, err := events.ParseSince(c.in, now)
		if c.bad {
			if err == nil {
				t.Errorf("%q: no error", c.in)
			}
			continue
		}
		if err != nil || !got.Equal(c.want) {
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestLogFollowsItsFileRemoved(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, events.LogOptions{})
	emitAll(l, 0, 1)
	waitLines(t, dir, 1)
	os.Remove(filepath.Join(dir, events.LogFile)) // the state dir's content removed under the agent
	emitAll(l, 1, 1)
	l.Close()
	if got := readAll(t, dir, time.Time{}); len(got) != 1 || got[0] != ev(1) {
		t.Errorf("after the log was removed: %v, want the event told since", got)
	}
}

func waitLines(t *testing.T, dir string, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(readAll(t, dir, time.Time{})) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events not written", n)
		}
	}
}

// TestFollowAcrossTwoRotationsBetweenLooks: the log rotates twice while a
// follower waits; the file in between is read, not lost.
func TestFollowAcrossTwoRotationsBetweenLooks(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, events.LogOptions{MaxBytes: 1024, Queue: 10_000})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var got []events.Event
	done := make(chan error, 1)
	go func() {
		done <- events.Follow(ctx, state.At(dir), time.Time{}, 500*time.Millisecond, func(e events.Event) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, e)
			return nil
		})
	}()
	// The follower read the empty log, and waits: 16 events of about 170
	// bytes rotate the log twice meanwhile.
	time.Sleep(100 * time.Millisecond)
	const n = 16
	emitAll(l, 0, n)
	l.Close()
	waitFor := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n || time.Now().After(waitFor) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Fatalf("followed %d events of %d", len(got), n)
	}
	for i, e := range got {
		if e != ev(i) {
			t.Fatalf("followed %v at %d, want %v", e, i, ev(i))
		}
	}
	entries, _ := os.ReadDir(dir)
	if data, _ := os.ReadFile(filepath.Join(dir, events.LogFile)); len(entries) != 2 || strings.Count(string(data), "\n") >= n/2 {
		t.Fatalf("not rotated twice: the test proves nothing")
	}
}
