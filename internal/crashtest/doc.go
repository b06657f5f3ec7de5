// Package crashtest holds cortex-sync's slow reliability suites, run against
// the real binary: the crash suite (build tag crash, make test-crash) kills
// syncs at seeded moments; the fault suite (build tag faults, make
// test-faults) injects disk, permission, layout and Git server faults. The
// package itself is empty; everything lives in its tagged test files.
package crashtest
