package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a buffer a command writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogsFollow: logs -f prints the tail, then what is appended, from the
// start again after a rotation truncated the file, until interrupted.
func TestLogsFollow(t *testing.T) {
	state := t.TempDir()
	log := filepath.Join(state, "logs", "web.log")
	os.MkdirAll(filepath.Dir(log), 0o700)
	os.WriteFile(log, []byte("one\ntwo\nthree\n"), 0o600)
	out, waitFor, stop := follow(t, strings.Contains, "--tail", "1", "--state-dir", state)
	waitFor("three\n")
	if strings.Contains(out.String(), "two") {
		t.Fatalf("--tail 1 printed more: %q", out.String())
	}
	f, _ := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0o600)
	f.WriteString("four\n")
	waitFor("three\nfour\n")
	// A rotation copies the log away and truncates it in place.
	os.Truncate(log, 0)
	f.WriteString("five\n")
	f.Close()
	waitFor("four\nfive\n")
	stop()
}

// follow runs logs -f Process/web with args until stop, which fails the
// test unless it ends, with 0, when interrupted; waitFor waits until what
// it printed matches want (by match).
func follow(t *testing.T, match func(out, want string) bool, args ...string) (out *syncBuffer, waitFor func(want string), stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, append([]string{"logs", "-f", "Process/web"}, args...), strings.NewReader(""), &stdout, &stderr)
	}()
	waitFor = func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !match(stdout.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("logs -f %v printed %q, never %q (stderr %q)", args, stdout.String(), want, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	stop = func() {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("logs -f exited %d: %s", code, stderr.String())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("logs -f did not end when interrupted")
		}
	}
	return &stdout, waitFor, stop
}

// TestLogsJSON: logs -o json writes one object a line, the last line
// even without its newline, following too; a line that comes in two parts
// is one object, written once its newline comes.
func TestLogsJSON(t *testing.T) {
	state := t.TempDir()
	log := filepath.Join(state, "logs", "web.log")
	os.MkdirAll(filepath.Dir(log), 0o700)
	os.WriteFile(log, []byte("one\n<two> & \"2\"\nthree"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `{"resource":"Process/web","line":"one"}
{"resource":"Process/web","line":"<two> & \"2\""}
{"resource":"Process/web","line":"three"}
`},
		{[]string{"--tail", "1"}, `{"resource":"Process/web","line":"three"}
`},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"logs", "Process/web", "-o", "json", "--state-dir", state}, tc.args...)
		if code := run(context.Background(), args, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
		}
		if out.String() != tc.want {
			t.Errorf("%v printed\n%s\nwant\n%s", args, out.String(), tc.want)
		}
	}

	os.WriteFile(log, []byte("one\n"), 0o600)
	out, waitFor, stop := follow(t, func(out, want string) bool { return out == want }, "-o", "json", "--state-dir", state)
	one := `{"resource":"Process/web","line":"one"}` + "\n"
	waitFor(one)
	f, _ := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0o600)
	f.WriteString("four\nfi")
	f.Close()
	four := one + `{"resource":"Process/web","line":"four"}` + "\n"
	waitFor(four)
	stop()
	if want := four + `{"resource":"Process/web","line":"fi"}` + "\n"; out.String() != want {
		t.Errorf("interrupted, logs -f -o json printed %q, want %q (the part of a line it held)", out.String(), want)
	}

	var parts bytes.Buffer
	j := &jsonLines{enc: json.NewEncoder(&parts), id: "Command/x"}
	j.Write([]byte("fo"))
	if parts.Len() != 0 {
		t.Fatalf("a part of a line was written: %q", parts.String())
	}
	j.Write([]byte("ur\n"))
	if want := `{"resource":"Command/x","line":"four"}` + "\n"; parts.String() != want {
		t.Errorf("two parts of a line gave %q, want %q", parts.String(), want)
	}
}
