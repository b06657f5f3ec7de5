package resource_test

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/cortex-sync/cortex-sync/pkg/driver"
	"github.com/cortex-sync/cortex-sync/pkg/resource"
)

func fileDoc(i int, content string) string {
	return fmt.Sprintf("---\napiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: f%d}\nspec: {path: /f/%d, content: %q}\n", i, i, content)
}

func TestLimits(t *testing.T) {
	small := resource.Limits{FileBytes: 1000, TotalBytes: 1500, Documents: 5, Depth: 8}
	nested := "apiVersion: cortex-sync/v1alpha1\nkind: File\nmetadata: {name: deep}\nspec:\n  path: /deep\n  content: x\n  owner: " +
		strings.Repeat("[", 10) + strings.Repeat("]", 10) + "\n"
	tests := []struct {
		name  string
		files map[string]string
		limit string // "" when it loads
		want  string
	}{
		{"within every limit", map[string]string{"a.yaml": fileDoc(1, "x") + fileDoc(2, "y")}, "", ""},
		{"a file too big", map[string]string{"a.yaml": fileDoc(1, strings.Repeat("x", 1200))}, "FileBytes",
			"a.yaml: it holds 1301 bytes, more than the 1000 bytes a manifest file may hold (limit FileBytes: --limit-file-bytes raises it, or limitFileBytes in the Agent config); move large content into a file named by spec.source"},
		{"too much in all", map[string]string{"a.yaml": fileDoc(1, strings.Repeat("x", 700)), "b.yaml": fileDoc(2, strings.Repeat("y", 700))}, "TotalBytes",
			"b.yaml: the manifests up to this file hold 1602 bytes, more than the 1500 bytes all manifest files together may hold (limit TotalBytes"},
		{"too many documents", map[string]string{"a.yaml": fileDoc(1, "") + fileDoc(2, "") + fileDoc(3, ""), "b.yaml": fileDoc(4, "") + fileDoc(5, "") + fileDoc(6, "")}, "Documents",
			"b.yaml:11: document 3 brings the manifests to 6 documents, more than the 5 documents all manifest files together may hold (limit Documents"},
		{"nested too deep", map[string]string{"a.yaml": nested}, "Depth",
			"a.yaml:7: document 1 nests deeper, more than the 8 levels a document may nest (limit Depth"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadWith(t, resource.Options{Limits: small}, tt.files)
			if tt.limit == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var le *resource.LimitError
			if !errors.As(err, &le) || le.Limit != tt.limit || !errors.Is(err, resource.ErrLimit) {
				t.Fatalf("got %v, want a LimitError on %s", err, tt.limit)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got\n%s\nwant it to contain\n%s", err, tt.want)
			}
		})
	}
}

// sizedFS reports a size for a file it refuses to read: a manifest over the
// limit is refused by its size alone.
type sizedFS struct{ fstest.MapFS }

func (s sizedFS) Open(name string) (fs.File, error) {
	if strings.HasSuffix(name, ".yaml") {
		return nil, errors.New("read a file that is over the limit")
	}
	return s.MapFS.Open(name)
}

func (s sizedFS) Lstat(name string) (fs.FileInfo, error) { return fs.Stat(s.MapFS, name) }

func TestLimitCheckedBeforeReading(t *testing.T) {
	fsys := sizedFS{fstest.MapFS{"huge.yaml": {Data: make([]byte, 9<<20)}}}
	_, err := resource.Options{}.Load(fsys, ".", driver.Kinds())
	var le *resource.LimitError
	if !errors.As(err, &le) || le.Limit != "FileBytes" {
		t.Fatalf("got %v, want the FileBytes limit", err)
	}
}

// endless is a manifest file that never ends and does not know its size.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '#'
	}
	return len(p), nil
}

type endlessFS struct{}

func (endlessFS) Open(name string) (fs.File, error) {
	switch name {
	case ".":
		return fstest.MapFS{"stream.yaml": {}}.Open(".")
	case "stream.yaml":
		return endlessFile{}, nil
	}
	return nil, fs.ErrNotExist
}

type endlessFile struct{ io.Reader }

func (endlessFile) Stat() (fs.FileInfo, error) {
	return fstest.MapFS{"stream.yaml": {}}.Stat("stream.yaml")
}
func (endlessFile) Read(p []byte) (int, error) { return endless{}.Read(p) }
func (endlessFile) Close() error               { return nil }

func TestLimitBoundsAnUnsizedRead(t *testing.T) {
	_, err := resource.Options{}.Load(endlessFS{}, ".", driver.Kinds())
	var le *resource.LimitError
	if !errors.As(err, &le) || le.Limit != "FileBytes" {
		t.Fatalf("got %v, want the FileBytes limit", err)
	}
}
