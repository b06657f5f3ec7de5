package source

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// TestPacksStream runs the pack tests again with every object of more
// than 64 bytes streamed: inflated, delta-applied and hashed as it is
// read, its delta bases in scratch files, in the reader and the indexer;
// no stream or scratch file is left open.
func TestPacksStream(t *testing.T) {
	defer func(was int64) { streamAbove = was }(streamAbove)
	streamAbove = 64
	before := openFDs(t)
	defer func() {
		if after := openFDs(t); after != before {
			t.Errorf("%d descriptors open after the tests, %d before: a stream or a scratch file left open", after, before)
		}
	}()
	for name, test := range map[string]func(*testing.T){
		"reader": TestPackReaderAgreesWithGit, "index": TestPackIndexAgreesWithGit,
		"thin": TestThinPack, "parallel": TestParallelBlobReads,
		"corrupt": TestPackReaderCorruptPack, "delta errors": TestPackReaderDeltaErrors,
		"damage": TestPackWriterRejectsDamage,
	} {
		t.Run(name, test)
	}
}

// appendVarint appends git's delta size varint.
func appendVarint(b []byte, v int) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// randomDelta is a valid delta on base, of copies and literal runs.
func randomDelta(rng *rand.Rand, base []byte) (delta, target []byte) {
	var ops []byte
	for range rng.IntN(20) {
		if rng.IntN(2) == 0 && len(base) > 0 {
			off := rng.IntN(len(base))
			size := 1 + rng.IntN(len(base)-off)
			cmd := byte(0x80)
			var args []byte
			for i := range 4 {
				if b := byte(off >> (8 * i)); b != 0 {
					cmd |= 1 << i
					args = append(args, b)
				}
			}
			if size != 0x10000 {
				for i := range 3 {
					if b := byte(size >> (8 * i)); b != 0 {
						cmd |= 0x10 << i
						args = append(args, b)
					}
				}
			}
			ops = append(append(ops, cmd), args...)
			target = append(target, base[off:off+size]...)
		} else {
			lit := make([]byte, 1+rng.IntN(127))
			for i := range lit {
				lit[i] = byte(rng.Uint32())
			}
			ops = append(append(ops, byte(len(lit))), lit...)
			target = append(target, lit...)
		}
	}
	delta = appendVarint(appendVarint(nil, len(base)), len(target))
	return append(delta, ops...), target
}

// TestDeltaReaderAgreesWithPatchDelta applies random deltas, valid and
// damaged, both ways: the stream makes what go-git's PatchDelta makes,
// and refuses what it refuses, read in one byte at a time or all at once.
// (It is stricter about a damaged header, which PatchDelta reads past its
// end.)
func TestDeltaReaderAgreesWithPatchDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 2000 {
		base := make([]byte, 1+rng.IntN(70000))
		for j := range base {
			base[j] = byte(rng.Uint32())
		}
		delta, _ := randomDelta(rng, base)
		damaged := i%2 == 1
		if damaged {
			switch rng.IntN(3) {
			case 0:
				delta = delta[:rng.IntN(len(delta))]
			case 1:
				delta[rng.IntN(len(delta))] ^= byte(1 + rng.IntN(255))
			default:
				delta = append(delta, byte(rng.Uint32()))
			}
		}
		want, wantErr := packfile.PatchDelta(base, delta)
		for _, oneByte := range []bool{false, true} {
			got, header, err := streamDelta(base, delta, oneByte)
			if !damaged && err != nil || err == nil && (wantErr != nil || !bytes.Equal(got, want)) || err != nil && wantErr == nil && !header {
				t.Fatalf("case %d (one byte at a time: %v): stream %d bytes, %v; PatchDelta %d bytes, %v", i, oneByte, len(got), err, len(want), wantErr)
			}
		}
	}
}

// streamDelta applies delta with a deltaReader; header says the delta's
// header was refused.
func streamDelta(base, delta []byte, oneByte bool) (out []byte, header bool, err error) {
	d := bytes.NewReader(delta)
	bsize, target, err := deltaSizes(d)
	if err != nil {
		return nil, true, err
	}
	if bsize != int64(len(base)) {
		return nil, true, packfile.ErrInvalidDelta
	}
	var r io.Reader = newDeltaReader(newMem(base, true), d, target)
	if oneByte {
		r = iotest.OneByteReader(r)
	}
	out, err = io.ReadAll(r)
	if err == nil && int64(len(out)) != target {
		err = errors.New("short")
	}
	return out, false, err
}

func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	n := 0
	for _, fd := range fds {
		// A Git keeps its cache's packs and their indexes open for its
		// life (it has no Close): those are not what is counted.
		l, _ := os.Readlink("/proc/self/fd/" + fd.Name())
		if l = strings.TrimSuffix(l, " (deleted)"); !strings.HasSuffix(l, ".pack") && !strings.HasSuffix(l, ".idx") {
			n++
		}
	}
	return n
}
