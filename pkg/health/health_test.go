package health

import "testing"

func TestWorst(t *testing.T) {
	tests := []struct {
		in   []Status
		want Status
	}{
		{nil, Healthy},
		{[]Status{Healthy, Healthy}, Healthy},
		{[]Status{Healthy, Suspended}, Suspended},
		{[]Status{Progressing, Suspended, Healthy}, Progressing},
		{[]Status{Missing, Progressing}, Missing},
		{[]Status{Missing, Degraded, Healthy}, Degraded},
		{[]Status{Degraded, Unknown}, Unknown},
	}
	for _, tt := range tests {
		if got := Worst(tt.in...); got != tt.want {
			t.Errorf("Worst(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
