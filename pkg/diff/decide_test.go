package diff

import "testing"

// TestDecide pins Decide's table, row by row, and the cases around it.
func TestDecide(t *testing.T) {
	v := Verbs{Create: Create, Update: Restart}
	for _, tc := range []struct {
		name   string
		o      Observation
		action Action
		reason Reason
	}{
		{"gone and not desired", Observation{}, NoOp, NoReason},
		{"left Git", Observation{Exists: true, Recorded: true}, Delete, RemovedFromGit},
		{"declared absent", Observation{Exists: true, Declared: true}, Delete, DeclaredAbsent},
		{"new", Observation{Desired: true}, Create, AddedInGit},
		{"crashed", Observation{Desired: true, Recorded: true, Crashed: true}, Restart, Crashed},
		{"missing, changed in Git", Observation{Desired: true, Recorded: true, GitChanged: true}, Restart, ChangedInGit},
		{"missing", Observation{Desired: true, Recorded: true}, Create, MissingOnHost},
		{"wrong type, ours before", Observation{Desired: true, Recorded: true, Exists: true, WrongType: "directory"}, Restart, Drifted},
		{"wrong type, never applied", Observation{Desired: true, Exists: true, WrongType: "directory"}, Restart, AddedInGit},
		{"in sync", Observation{Desired: true, Recorded: true, Exists: true, Matches: true}, NoOp, NoReason},
		{"runs as desired, supervisor gone: adopted, not restarted", Observation{Desired: true, Recorded: true, Exists: true, Matches: true, Unsupervised: true, Attrs: []Attr{{Field: "supervisor"}}}, Adopt, Drifted},
		{"runs an old spec, supervisor gone: restarted", Observation{Desired: true, Recorded: true, Exists: true, Ours: true, GitChanged: true, Unsupervised: true}, Restart, ChangedInGit},
		{"found as desired, never applied", Observation{Desired: true, Exists: true}, Restart, AddedInGit},
		{"failed last time", Observation{Desired: true, Recorded: true, Exists: true, Failed: true}, Restart, Retry},
		{"changed in Git", Observation{Desired: true, Recorded: true, Exists: true, Ours: true, GitChanged: true}, Restart, ChangedInGit},
		{"a secret rotated on the host", Observation{Desired: true, Recorded: true, Exists: true, Ours: true, GitChanged: true, SecretChanged: true}, Restart, SecretChanged},
		{"missing, a secret rotated", Observation{Desired: true, Recorded: true, GitChanged: true, SecretChanged: true}, Restart, SecretChanged},
		{"failed last time, a secret rotated", Observation{Desired: true, Recorded: true, Exists: true, Ours: true, Failed: true, GitChanged: true, SecretChanged: true}, Restart, SecretChanged},
		{"edited on the host", Observation{Desired: true, Recorded: true, Exists: true}, Restart, Drifted},
		{"edited on the host and changed in Git", Observation{Desired: true, Recorded: true, Exists: true, GitChanged: true}, Restart, Drifted},
	} {
		a, r := Decide(&tc.o, v)
		if a != tc.action || r != tc.reason {
			t.Errorf("%s: %s (%s), want %s (%s)", tc.name, a, r, tc.action, tc.reason)
		}
	}
}
