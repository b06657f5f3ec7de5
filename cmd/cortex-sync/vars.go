package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/cortex-sync/cortex-sync/pkg/hostfs"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
	"github.com/cortex-sync/cortex-sync/pkg/vars"
)

// machineID is /etc/machine-id of the host under root, for
// ${host.machineID}; "" when there is none (the variable is then not
// defined, and a manifest that uses it is refused).
func machineID(root string) string {
	r, err := hostfs.Open(root, nil)
	if err != nil {
		return ""
	}
	defer r.Close()
	f, err := r.OpenFile("/etc/machine-id")
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// countDecrypts makes *decrypt count the vars files it decrypts, each
// once, when on (validate --decrypt); the function returned reads the
// count.
func countDecrypts(decrypt *vars.Decrypt, on bool) func() int {
	if !on || *decrypt == nil {
		return func() int { return 0 }
	}
	var mu sync.Mutex
	done := map[string]bool{}
	inner := *decrypt
	*decrypt = func(name string, data []byte) ([]byte, error) {
		plain, err := inner(name, data)
		if err == nil {
			mu.Lock()
			done[name] = true
			mu.Unlock()
		}
		return plain, err
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(done)
	}
}

// varDoc is one variable in `fleet targets --vars -o json`: a secret's
// value is redacted.
type varDoc struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Secret bool   `json:"secret,omitempty"`
	From   string `json:"from"`
}

// hostVarDocs are the variables host h has from fleet f, shown.
func hostVarDocs(f *resource.Fleet, co *checkout, h resource.Host, decrypt vars.Decrypt) ([]varDoc, error) {
	s, err := f.Vars(co.Tree, h, decrypt)
	if err != nil {
		return nil, err
	}
	docs := []varDoc{}
	for _, name := range s.Names() {
		v, _ := s.Lookup(name)
		docs = append(docs, varDoc{Name: name, Value: v.Shown(), Secret: v.Secret, From: v.From})
	}
	return docs, nil
}

// varsText is the variables as a table.
func varsText(b *strings.Builder, docs []varDoc) {
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tVALUE\tFROM")
	for _, d := range docs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", d.Name, quoteVar(d), d.From)
	}
	tw.Flush()
}

func quoteVar(d varDoc) string {
	if d.Secret {
		return d.Value
	}
	return fmt.Sprintf("%q", d.Value)
}
