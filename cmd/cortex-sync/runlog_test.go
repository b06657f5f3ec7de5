package main

import "testing"

// TestLogURL: the agent's start line names its source, never a password
// in its URL.
func TestLogURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://bot:s3cret@git.example.com/infra.git": "https://bot:xxxxx@git.example.com/infra.git",
		"https://git.example.com/infra.git":            "https://git.example.com/infra.git",
		"ssh://git@git.example.com/infra.git":          "ssh://git@git.example.com/infra.git",
		"/srv/repo":                                    "/srv/repo",
	} {
		if got := logURL(in); got != want {
			t.Errorf("logURL(%q) = %q, want %q", in, got, want)
		}
	}
}
