package driver

import "testing"

// TestNameSetLastByte: sets of names that differ only in their last
// bytes, the way numbered names do, digest apart. Summed unmixed, FNV-1a
// made {p+x, p+x^3} and {p+x^1, p+x^2} digest the same for every prefix p
// and byte x (TestAttackNamesDigestCollides is what that did to a sync).
func TestNameSetLastByte(t *testing.T) {
	digest := func(names ...string) string {
		var d nameSet
		for _, n := range names {
			d.add(n)
		}
		return d.String()
	}
	for _, p := range []string{"", "v", "chapter-", "app.log."} {
		for x := byte(' '); x < 0x7f; x++ {
			a, b := digest(p+string(x), p+string(x^3)), digest(p+string(x^1), p+string(x^2))
			if a == b {
				t.Fatalf("{%q, %q} and {%q, %q} digest the same: %s", p+string(x), p+string(x^3), p+string(x^1), p+string(x^2), a)
			}
		}
	}
	if digest("a", "b") != digest("b", "a") {
		t.Error("the digest depends on the names' order")
	}
}
