package progress

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestBarsDrawCountsAndLines(t *testing.T) {
	var out bytes.Buffer
	ctx := With(context.Background(), Bars(&out))
	task := Start(ctx, "writing /srv/kb", 4)
	task.Add(1)
	task.Add(3) // done: the bar is cleared, not drawn again
	task.Done()
	if s := out.String(); !strings.Contains(s, "writing /srv/kb") || !strings.Contains(s, "1/4") {
		t.Fatalf("the bar shows neither what nor how far: %q", s)
	}

	out.Reset()
	w := Lines(ctx, "fetching")
	// A Git server redraws its line with \r; only whole lines are news.
	w.Write([]byte("Counting objects:  50% (1/2)\rCounting objects: 100% (2/2), done.\nCompress"))
	w.Close()
	if s := out.String(); !strings.Contains(s, "fetching: Counting objects: 100% (2/2), done.") || strings.Contains(s, "Compress") {
		t.Fatalf("the spinner does not say the server's last whole line: %q", s)
	}
}

func TestNothingWithoutAReporter(t *testing.T) {
	ctx := context.Background()
	task := Start(ctx, "writing", 10)
	task.Add(10)
	task.Done()
	if w := Lines(ctx, "fetching"); w != nil {
		t.Fatalf("Lines without a reporter = %v, want nil (the server is then not asked for progress)", w)
	}
}
