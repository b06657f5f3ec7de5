package main

import (
	"bytes"
	"context"
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
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"logs", "-f", "--tail", "1", "Process/web", "--state-dir", state}, strings.NewReader(""), &out, &errOut)
	}()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("logs -f printed %q, never %q (stderr %q)", out.String(), want, errOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
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
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("logs -f exited %d: %s", code, errOut.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("logs -f did not end when interrupted")
	}
}
