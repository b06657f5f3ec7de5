package main

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestColor: colour on a terminal, never when NO_COLOR is set, never into
// a pipe or a buffer.
func TestColor(t *testing.T) {
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer pty.Close()
	t.Setenv("NO_COLOR", "")
	if !colorOK(pty) {
		t.Error("no colour on a terminal")
	}
	if colorOK(&bytes.Buffer{}) {
		t.Error("colour into a buffer")
	}
	t.Setenv("NO_COLOR", "1")
	if colorOK(pty) {
		t.Error("colour on a terminal with NO_COLOR=1")
	}
}
