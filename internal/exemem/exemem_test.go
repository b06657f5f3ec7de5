package exemem

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fileRSS is the process's resident file-backed memory, in kB.
func fileRSS(b *testing.B) int {
	b.Helper()
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skip("no /proc/self/status:", err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Skip("no RssFile in /proc/self/status")
	return 0
}

// TestRelease: the executable's read-only mappings are released, and the
// program goes on running from the page cache. (How much leaves the
// resident set is BenchmarkRelease's figure: residency depends on the
// load and on what else faulted the pages in.)
func TestRelease(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("released no mapping of the executable") // (this test still runs: its pages faulted back in)
	}
}

// BenchmarkRelease reports the process's file-backed RSS before and after
// a release.
func BenchmarkRelease(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads /proc")
	}
	for b.Loop() {
		before := fileRSS(b)
		if _, err := Release(); err != nil {
			b.Fatal(err)
		}
		after := fileRSS(b)
		b.ReportMetric(float64(before), "file-RSS-kB-before")
		b.ReportMetric(float64(after), "file-RSS-kB-after")
	}
}

func TestReadOnlyMappings(t *testing.T) {
	maps := t.TempDir() + "/maps"
	os.WriteFile(maps, []byte(`00400000-00bdf000 r-xp 00000000 fd:00 1234                               /usr/bin/cortex-sync
00bdf000-0147f000 r--p 007df000 fd:00 1234                               /usr/bin/cortex-sync
0147f000-01501000 rw-p 0107f000 fd:00 1234                               /usr/bin/cortex-sync
01501000-035ad000 rw-p 00000000 00:00 0
7f0000000000-7f0000100000 r-xp 00000000 fd:00 99                         /usr/bin/cortex-sync-other
7f0000200000-7f0000300000 r--p 00000000 fd:00 98                         /usr/lib/my dir/cortex-sync
7fff00000000-7fff00002000 r-xp 00000000 00:00 0                          [vdso]
`), 0o600)
	got, err := readOnlyMappings(maps, "/usr/bin/cortex-sync")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uintptr{{0x400000, 0xbdf000}, {0xbdf000, 0x147f000}}
	if !slices.Equal(got, want) {
		t.Errorf("the code and read-only data of /usr/bin/cortex-sync: got %x, want %x", got, want)
	}
	// A path with a space; replaced on disk while it runs.
	os.WriteFile(maps, []byte("7f0000200000-7f0000300000 r--p 00000000 fd:00 98                         /usr/lib/my dir/cortex-sync (deleted)\n"), 0o600)
	if got, _ := readOnlyMappings(maps, "/usr/lib/my dir/cortex-sync"); len(got) != 1 {
		t.Errorf("a deleted executable under a path with a space: got %x, want one range", got)
	}
	os.WriteFile(maps, []byte("zz-00bdf000 r-xp 00000000 fd:00 1234 /usr/bin/cortex-sync\n"), 0o600)
	if _, err := readOnlyMappings(maps, "/usr/bin/cortex-sync"); err == nil || !strings.Contains(err.Error(), maps) {
		t.Errorf("a bad line: got %v, want an error naming %s", err, maps)
	}
}
