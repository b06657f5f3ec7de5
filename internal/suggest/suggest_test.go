package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"branch", "brunch", "tag", "secretFile"}
	for _, c := range []struct {
		name string
		fold bool
		want string
	}{
		{"brnch", false, "branch"}, // a tie with brunch goes to the first sorted
		{"TAG", true, "tag"},
		{"TAG", false, ""},
		{"secretFil", false, "secretFile"},
		{"nothing-like-it", false, ""},
	} {
		if got := Closest(c.name, known, c.fold); got != c.want {
			t.Errorf("Closest(%q, fold %v) = %q, want %q", c.name, c.fold, got, c.want)
		}
	}
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance = %d", d)
	}
}
