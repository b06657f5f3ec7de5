package exemem

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// fileRSS is the process's resident file-backed memory, in kB.
func fileRSS(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestRelease: the executable's pages leave the process's resident set,
// and the program goes on running from the page cache.
func TestRelease(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before := fileRSS(t)
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := fileRSS(t)
	if n == 0 || after >= before {
		t.Errorf("released %d bytes of mappings; file-backed RSS %d kB before, %d kB after", n, before, after)
	}
}

func TestReadOnlyMappings(t *testing.T) {
	maps := t.TempDir() + "/maps"
	os.WriteFile(maps, []byte(`00400000-00bdf000 r-xp 00000000 fd:00 1234                               /usr/bin/cortex-sync
00bdf000-01200000 r--p 007df000 fd:00 1234                               /usr/bin/cortex-sync
01200000-01300000 rw-p 00e00000 fd:00 1234                               /usr/bin/cortex-sync
7f0000000000-7f0000001000 r--p 00000000 fd:00 99                         /usr/lib/libc.so
`), 0o644)
	got, err := readOnlyMappings(maps, "/usr/bin/cortex-sync")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != [2]uintptr{0x400000, 0xbdf000} || got[1] != [2]uintptr{0xbdf000, 0x1200000} {
		t.Errorf("got %x, want the two read-only mappings of the binary", got)
	}
}
