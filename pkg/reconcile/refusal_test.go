package reconcile_test

import (
	"testing"

	"github.com/cortex-sync/cortex-sync/pkg/reconcile"
)

// TestRefusalSummary: a fleet's host line names a signature's commit,
// signer and why before the source's URL would cut them off.
func TestRefusalSummary(t *testing.T) {
	for _, c := range []struct {
		r    reconcile.Refusal
		want string
	}{
		{reconcile.Refusal{Revision: "main@sha1:1", Error: "1 problem in the manifests", Reason: "manifests"}, "revision main@sha1:1 refused: 1 problem in the manifests"},
		{reconcile.Refusal{Revision: "main@sha1:1", Error: "fetch …", Reason: "signature", Commit: "commit 2", Signer: "unsigned", Why: "a signature by a trusted key is required"},
			"revision main@sha1:1 refused for its signature: commit 2 is not signed: a signature by a trusted key is required"},
		{reconcile.Refusal{Revision: "main@sha1:1", Error: "fetch …", Reason: "signature", Commit: "commit 2", Signer: "SSH key SHA256:x", Why: "key not allowed"},
			"revision main@sha1:1 refused for its signature: commit 2 is signed by SSH key SHA256:x: key not allowed"},
	} {
		if got := c.r.Summary(); got != c.want {
			t.Errorf("Summary() = %q, want %q", got, c.want)
		}
	}
}
