package supervise

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	r := NewRedactor([]Secret{{Name: "A", Value: "abcab"}, {Name: "B", Value: "s3cr3t"}, {Name: "E", Value: ""}})
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"nothing here", "nothing here"},
		{"abcab", "[redacted:A]"},
		{"xabcabcab s3cr3t!", "x[redacted:A]cab [redacted:B]!"},
		{"abca", "abca"}, // a prefix at the end of all output is not the secret
		{"s3cr3s3cr3t", "s3cr3[redacted:B]"},
	} {
		if got := r.String(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRedactStream feeds output in two writes split at every place: the
// result is the same as redacting it whole, and what is written before
// the end never holds part of a secret that the rest completes.
func TestRedactStream(t *testing.T) {
	r := NewRedactor([]Secret{{Name: "A", Value: "abcab"}, {Name: "T", Value: "tok-123"}})
	for _, in := range []string{"xxabcabyy tok-123 abcabcab", "tok-12tok-123", "ababcab", "tok-1"} {
		whole := r.String(in)
		for cut := 0; cut <= len(in); cut++ {
			first, rest := r.next([]byte(in[:cut]), false)
			second, _ := r.next(append(rest, in[cut:]...), true)
			if got := string(first) + string(second); got != whole {
				t.Errorf("%q cut at %d: %q, want %q", in, cut, got, whole)
			}
			if !strings.HasPrefix(whole, string(first)) {
				t.Errorf("%q cut at %d: wrote %q early, not a prefix of %q", in, cut, first, whole)
			}
		}
	}
}

func TestSecretValue(t *testing.T) {
	for in, want := range map[string]string{"tok\n": "tok", "tok\r\n": "tok", "tok": "tok", "a\nb\n\n": "a\nb\n"} {
		if got, err := SecretValue([]byte(in)); err != nil || got != want {
			t.Errorf("SecretValue(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", "a\x00b"} {
		if _, err := SecretValue([]byte(in)); err == nil {
			t.Errorf("SecretValue(%q): no error", in)
		}
	}
}

// BenchmarkRedactStream is the redactor's cost on log-like output with two
// secrets, in 32 KiB reads as the redactor makes them.
func BenchmarkRedactStream(b *testing.B) {
	r := NewRedactor([]Secret{{Name: "A", Value: "s3cr3t-TOKEN-4242"}, {Name: "B", Value: "postgres-password-xyz"}})
	line := []byte("2026-11-30T03:00:00Z GET /api/v1/items?id=42 200 1.2ms user=alice s3cr3t-TOKEN-424\n")
	chunk := bytes.Repeat(line, 32<<10/len(line))
	b.SetBytes(int64(len(chunk)))
	var pending []byte
	for b.Loop() {
		_, pending = r.next(append(pending, chunk...), false)
	}
}
