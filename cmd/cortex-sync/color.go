package main

import (
	"io"
	"os"
)

// colorOK reports whether output to w may use ANSI colours: only on a
// terminal, and never when NO_COLOR is set to anything (https://no-color.org).
func colorOK(w io.Writer) bool {
	if os.Getenv("NO_COLOR") != "" {
		return false
	}
	return isTerminal(w)
}
