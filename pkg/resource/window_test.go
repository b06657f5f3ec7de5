package resource_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestWindowsAt(t *testing.T) {
	weekdays := resource.Window{Schedule: "0 22 * * 1-5", Duration: resource.Duration(2 * time.Hour), TimeZone: "Europe/Paris"}
	tests := []struct {
		name string
		ws   resource.Windows
		now  string
		open bool
		next string
	}{
		{"none: always", nil, "2026-12-06T10:00:00Z", true, ""},
		// 2026-12-07 is a Monday; Paris is UTC+1 in winter.
		{"before on a weekday", resource.Windows{weekdays}, "2026-12-07T20:59:00Z", false, "2026-12-07T21:00:00Z"},
		{"at the start", resource.Windows{weekdays}, "2026-12-07T21:00:00Z", true, ""},
		{"past midnight, still open", resource.Windows{weekdays}, "2026-12-07T22:59:59Z", true, ""},
		{"closed at its end", resource.Windows{weekdays}, "2026-12-07T23:00:00Z", false, "2026-12-08T21:00:00Z"},
		{"Friday night to Monday", resource.Windows{weekdays}, "2026-12-11T23:30:00Z", false, "2026-12-14T21:00:00Z"},
		{"summer time", resource.Windows{weekdays}, "2026-07-01T12:00:00Z", false, "2026-07-01T20:00:00Z"},
		{"the earliest of two", resource.Windows{weekdays, {Schedule: "*/15 3 * * *", Duration: resource.Duration(time.Minute)}},
			"2026-12-07T03:01:00Z", false, "2026-12-07T03:15:00Z"},
		{"steps and lists", resource.Windows{{Schedule: "5,35 */6 1 1,7 *", Duration: resource.Duration(10 * time.Minute)}},
			"2026-12-07T00:00:00Z", false, "2027-01-01T00:05:00Z"},
		{"either day field", resource.Windows{{Schedule: "0 0 13 * 5", Duration: resource.Duration(time.Hour)}},
			"2026-12-07T00:00:00Z", false, "2026-12-11T00:00:00Z"},
		{"Sunday as 7", resource.Windows{{Schedule: "0 0 * * 7", Duration: resource.Duration(time.Hour)}},
			"2026-12-07T00:00:00Z", false, "2026-12-13T00:00:00Z"},
		{"open for days", resource.Windows{{Schedule: "0 0 1 * *", Duration: resource.Duration(72 * time.Hour)}},
			"2026-12-03T23:59:00Z", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, next := tt.ws.At(at(tt.now))
			if open != tt.open {
				t.Fatalf("open = %v, want %v", open, tt.open)
			}
			if tt.next != "" && !next.Equal(at(tt.next)) {
				t.Fatalf("next = %s, want %s", next.UTC().Format(time.RFC3339), tt.next)
			}
			if tt.next == "" && !next.IsZero() {
				t.Fatalf("next = %s, want none (open)", next)
			}
		})
	}
}

func TestWindowProblems(t *testing.T) {
	rule := "    - match: {}\n      paths: [base]\n"
	tests := []struct{ window, want string }{
		{`{schedule: "0 22 * *", duration: 2h}`, `fleet.yaml:13: document 1 (Fleet/prod): spec.hosts[2].windows[0].schedule: "0 22 * *" is not a schedule: write cron's five fields`},
		{`{schedule: "0 24 * * *", duration: 2h}`, `spec.hosts[2].windows[0].schedule: "0 24 * * *": hour field "24": "24" must be a number from 0 to 23`},
		{`{schedule: "0 5-2 * * *", duration: 2h}`, `hour field "5-2": range "5-2" runs backwards`},
		{`{schedule: "*/0 * * * *", duration: 2h}`, `minute field "*/0": step "0" must be a number from 1 to 59`},
		{`{schedule: "0 0 30 2 *", duration: 2h}`, `spec.hosts[2].windows[0].schedule: "0 0 30 2 *" never opens`},
		{`{schedule: "0 22 * * *"}`, `spec.hosts[2].windows[0].duration: is required`},
		{`{schedule: "0 22 * * *", duration: 30s}`, `spec.hosts[2].windows[0].duration: must be at least 1m0s`},
		{`{schedule: "0 22 * * *", duration: 200h}`, `spec.hosts[2].windows[0].duration: must be at most 168h0m0s`},
		{`{schedule: "0 22 * * *", duration: 1h, timeZone: Mars/Olympus}`, `fleet.yaml:13: document 1 (Fleet/prod): spec.hosts[2].windows[0].timeZone: "Mars/Olympus" is not an IANA time zone`},
		{`{schedule: "0 22 * * *", duration: 1h, zone: UTC}`, `spec.hosts[2].windows[0].zone: unknown field (known fields: duration, schedule, timeZone)`},
	}
	for _, tt := range tests {
		t.Run(tt.window, func(t *testing.T) {
			f := strings.Replace(fleetYAML, rule, rule+"      windows:\n        - "+tt.window+"\n", 1)
			_, err := resource.ReadFleet(fleetRepo(map[string]string{"fleet.yaml": f}))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant %q", err, tt.want)
			}
		})
	}
	t.Run("rollout", func(t *testing.T) {
		f := strings.Replace(fleetYAML, "failureThreshold: 2}", "failureThreshold: 2, windows: [{schedule: \"0 22 * * *\", duration: 0s}]}", 1)
		_, err := resource.ReadFleet(fleetRepo(map[string]string{"fleet.yaml": f}))
		if want := "spec.rollout.windows[0].duration: is required"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v\nwant %q", err, want)
		}
	})
}

func TestWindowsFor(t *testing.T) {
	rule := "    - match: {labels: {role: web}}\n      paths: [base, roles/web, \"hosts/{name}\"]\n"
	ruleWin := resource.Window{Schedule: "0 22 * * *", Duration: resource.Duration(time.Hour)}
	f := strings.Replace(fleetYAML, rule, rule+"      windows: [{schedule: \"0 22 * * *\", duration: 1h}]\n", 1)
	f = strings.Replace(f, "failureThreshold: 2}", "failureThreshold: 2, windows: [{schedule: \"0 3 * * *\", duration: 1h, timeZone: UTC}]}", 1)
	fl, err := resource.ReadFleet(fleetRepo(map[string]string{"fleet.yaml": f}))
	if err != nil {
		t.Fatal(err)
	}
	web := resource.Host{Name: "web1", Labels: map[string]string{"role": "web"}}
	if ws, which := fl.WindowsFor(web, false); len(ws) != 1 || ws[0] != ruleWin || which != "spec.hosts[1].windows" {
		t.Fatalf("web: %v %q", ws, which)
	}
	if ws, which := fl.WindowsFor(resource.Host{Name: "mail"}, true); len(ws) != 1 || ws[0].Schedule != "0 3 * * *" || which != "spec.rollout.windows" {
		t.Fatalf("mail in a fleet: %v %q", ws, which)
	}
	if ws, _ := fl.WindowsFor(resource.Host{Name: "mail"}, false); ws != nil {
		t.Fatalf("mail without a fleet: %v; a rollout gates nothing without a coordinator", ws)
	}
}
