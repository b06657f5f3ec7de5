package vars

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func testSet() *Set {
	s := NewSet("web1")
	AddFacts(s, Facts{Name: "web1", Labels: map[string]string{"role": "web", "app.kubernetes.io/name": "shop"}, MachineID: "abc123"})
	s.Add("db.host", Value{Text: "10.0.0.5", From: "fleet.yaml rule 1"})
	s.Add("db_port", Value{Text: "5432", From: "vars/common.yaml"})
	s.Add("password", Value{Text: "hunter2", Secret: true, From: "vars/secret.yaml"})
	return s
}

func TestRender(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain text", "plain text"},
		{"host=${host.name}", "host=web1"},
		{"${db.host}:${db_port}", "10.0.0.5:5432"},
		{"${host.labels.role}/${host.labels.app.kubernetes.io/name}", "web/shop"},
		{"id ${host.machineID}", "id abc123"},
		{"$${db.host}", "${db.host}"},                // the escape
		{"$${nope}", "${nope}"},                      // an escaped name need not exist
		{"$$${db.host}", "$${db.host}"},              // a $, then the escape: $${ is always a literal ${
		{"echo $HOME $1 $$ $", "echo $HOME $1 $$ $"}, // shell: left alone
		{"a $ {b}", "a $ {b}"},
		{"${db.host}\n${db.host}", "10.0.0.5\n10.0.0.5"},
		{"{${db_port}}", "{5432}"},
		{"ünïcode ${host.os}", "ünïcode linux"},
	} {
		got, _, err := Render(tc.in, testSet())
		if err != nil || got != tc.want {
			t.Errorf("Render(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestRenderUsed(t *testing.T) {
	_, used, err := Render("${db.host} ${db.host} ${password} $${db_port}", testSet())
	if err != nil {
		t.Fatal(err)
	}
	if len(used) != 2 || used["db.host"].Text != "10.0.0.5" || !used["password"].Secret || !used.Secret() {
		t.Errorf("used = %v", used)
	}
}

func TestRenderErrors(t *testing.T) {
	for _, tc := range []struct {
		in         string
		line, col  int
		name, want string
	}{
		{"x\n  ${db.hots}", 2, 3, "db.hots", `${db.hots} is not defined for host "web1" (did you mean ${db.host}?)`},
		{"${nothing.like.it}", 1, 1, "nothing.like.it", `${nothing.like.it} is not defined for host "web1"`},
		{"a ${", 1, 3, "", "${ is not closed"},
		{"a ${db.host\n}", 1, 3, "", "${ is not closed"},
		{"${}", 1, 1, "", "${} names no variable"},
		{"${a b}", 1, 1, "", "${a b} is not a variable reference"},
		{"${1x}", 1, 1, "", "is not a variable reference"},
		{"${a:=b}", 1, 1, "", "is not a variable reference"},
	} {
		got, _, err := Render(tc.in, testSet())
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Render(%q) = %q, %v; want an *Error", tc.in, got, err)
			continue
		}
		if e.Line != tc.line || e.Column != tc.col || e.Name != tc.name || e.Host != "web1" || !strings.Contains(e.Msg, tc.want) {
			t.Errorf("Render(%q): %+v; want line %d column %d name %q, %q", tc.in, e, tc.line, tc.col, tc.name, tc.want)
		}
	}
}

func TestRenderEveryError(t *testing.T) {
	_, _, err := Render("${a}\n${b}\n${}", testSet())
	var all Errors
	if !errors.As(err, &all) || len(all) != 3 {
		t.Fatalf("err = %v; want the three problems", err)
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"db.host": true, "DB_HOST": true, "_x": true, "a/b-c": true,
		"": false, "1a": false, "a b": false, "host.name": false, "host": false, "host.labels.x": false, "hostess": true,
	} {
		if got := CheckName(name) == ""; got != ok {
			t.Errorf("CheckName(%q) = %q", name, CheckName(name))
		}
	}
}

func TestFactsWin(t *testing.T) {
	s := NewSet("web1")
	AddFacts(s, Facts{Name: "web1"})
	if s.Add("host.name", Value{Text: "evil"}) {
		t.Fatal("a fact was overridden")
	}
	if v, _ := s.Lookup("host.name"); v.Text != "web1" {
		t.Fatalf("host.name = %q", v.Text)
	}
	if _, ok := s.Lookup("host.machineID"); ok {
		t.Fatal("an unknown machine ID is defined")
	}
}

func TestParseFile(t *testing.T) {
	values, lines, secret, err := ParseFile("vars/a.yaml", []byte("db.host: 10.0.0.5\nport: 5432\nflag: true\n"), nil)
	if err != nil || secret || values["db.host"] != "10.0.0.5" || values["port"] != "5432" || values["flag"] != "true" || lines["port"] != 2 {
		t.Fatalf("ParseFile = %v %v %v %v", values, lines, secret, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"a: [1]\n", "vars/a.yaml:1: \"a\" must have a string value"},
		{"a: {b: c}\n", "must have a string value"},
		{"a:\n", "must have a string value"},
		{"- a\n", "vars/a.yaml:1: a vars file is a mapping"},
		{"a: 1\na: 2\n", "vars/a.yaml:2: \"a\" is defined twice"},
		{"host.name: x\n", "names under host. are the host's facts"},
		{"a b: x\n", "is not a variable name"},
		{"a: 1\n---\nb: 2\n", "vars/a.yaml:3: a vars file is one mapping"},
		{"a: [\n", "vars/a.yaml: "},
		{strings.Repeat("1a: x\n", 50), "vars/a.yaml:21: and 30 more problems from here on"},
		{"sops: {age: []}\na: ENC[x]\n", "is SOPS-encrypted, and no SOPS key is configured"},
	} {
		_, _, _, err := ParseFile("vars/a.yaml", []byte(tc.in), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFile(%q) = %v; want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseSOPS(t *testing.T) {
	enc := []byte("password: ENC[AES256_GCM,data:xx]\nsops:\n  age: []\n")
	var got string
	decrypt := func(name string, data []byte) ([]byte, error) {
		got = name
		return []byte("password: hunter2\n"), nil
	}
	values, _, secret, err := ParseFile("vars/s.yaml", enc, decrypt)
	if err != nil || !secret || values["password"] != "hunter2" || got != "vars/s.yaml" {
		t.Fatalf("ParseFile = %v %v %v (decrypt got %q)", values, secret, err, got)
	}
	_, _, _, err = ParseFile("vars/s.yaml", enc, func(string, []byte) ([]byte, error) { return []byte("password: [hunter2"), nil })
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("a bad decrypted file: %v (must fail without quoting it)", err)
	}
	_, _, _, err = ParseFile("vars/s.yaml", enc, func(string, []byte) ([]byte, error) { return nil, errors.New("MAC mismatch") })
	if err == nil || !strings.Contains(err.Error(), "vars/s.yaml: decrypt: MAC mismatch") {
		t.Fatalf("a failed decryption: %v", err)
	}
}

// FuzzRender: never a panic; a rendering with no error holds no ${ that
// was not written as $${, and a text without ${ renders to itself.
func FuzzRender(f *testing.F) {
	for _, s := range []string{"", "${db.host}", "$${x}", "${", "${}", "${a b}", "$$$${db_port}}", "a\n${host.name}\n$"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, _, err := Render(in, testSet())
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Line < 1 || e.Column < 1 {
				t.Fatalf("Render(%q): %v is not an *Error with a position", in, err)
			}
			return
		}
		if !strings.Contains(in, "${") && out != in {
			t.Fatalf("Render(%q) = %q; a text without ${ must be left alone", in, out)
		}
		if utf8.ValidString(in) && !utf8.ValidString(out) {
			t.Fatalf("Render(%q) = %q is not UTF-8", in, out)
		}
	})
}

// BenchmarkRender renders a 1 MiB template with a reference every 64 bytes.
func BenchmarkRender(b *testing.B) {
	line := strings.Repeat("x", 40) + " ${db.host} $HOME $${y}\n"
	text := strings.Repeat(line, (1<<20)/len(line))
	s := testSet()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, _, err := Render(text, s); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRenderBounded: a hostile template (600 KB of unclosed ${, every
// reference malformed) is read in linear time, and at most MaxProblems
// problems are reported, then how many more there are.
func TestRenderBounded(t *testing.T) {
	for name, in := range map[string]string{
		"unclosed":  strings.Repeat("${", 300_000),
		"malformed": strings.Repeat("${a b}", 100_000),
		"undefined": strings.Repeat("${db.hots}", 60_000),
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, _, err := Render(in, testSet())
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("Render of %d bytes did not end in 10 s: not linear", len(in))
			}
			t.Logf("%d bytes in %v", len(in), time.Since(start))
			var all Errors
			if !errors.As(err, &all) || len(all) != MaxProblems+1 {
				t.Fatalf("got %d problems; want the first %d and a summary", len(all), MaxProblems)
			}
			last := all[MaxProblems].(*Error)
			if want := fmt.Sprintf("and %d more problems", strings.Count(in, "${")-MaxProblems); !strings.Contains(last.Msg, want) || last.Line != 1 || last.Column < 1 {
				t.Fatalf("summary = %+v; want %q at its position", last, want)
			}
		})
	}
}
