// Package exemem releases a process's mappings of its own executable. Most
// of a cortex-sync process's resident memory when it starts is the binary:
// the runtime and the init of every package linked in fault in some 13 MB
// of code and read-only data that the work then mostly never touches.
package exemem

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Release drops this process's page-table mappings of its executable's
// read-only segments (MADV_DONTNEED): the pages stay in the page cache,
// and what is used again faults back in from it cheaply. It returns how
// many bytes of mappings it advised.
func Release() (int, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	// Replaced on disk (an upgrade), it still runs as "PATH (deleted)".
	ranges, err := readOnlyMappings("/proc/self/maps", strings.TrimSuffix(exe, " (deleted)"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range ranges {
		// A raw syscall: the range is not Go memory, so no []byte names it.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_DONTNEED); errno != 0 {
			return n, fmt.Errorf("madvise %#x-%#x: %w", r[0], r[1], errno)
		}
		n += int(r[1] - r[0])
	}
	return n, nil
}

// readOnlyMappings lists the [start, end) ranges of the mappings of file
// that are not writable (code, read-only data), read from a maps file. A
// writable mapping holds the program's data and is left alone.
func readOnlyMappings(maps, file string) ([][2]uintptr, error) {
	f, err := os.Open(maps)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ranges [][2]uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-00bdf000 r-xp 00000000 fd:00 1234   /usr/bin/cortex-sync
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 6 || len(fields[1]) < 2 || fields[1][1] == 'w' {
			continue
		}
		path := strings.TrimSuffix(strings.TrimLeft(fields[5], " "), " (deleted)")
		if path != file {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			return nil, fmt.Errorf("%s: bad range %q", maps, fields[0])
		}
		ranges = append(ranges, [2]uintptr{uintptr(start), uintptr(end)})
	}
	return ranges, sc.Err()
}
