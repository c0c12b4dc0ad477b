package ratehttp_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// docs/HTTP.md's Go snippets are files of this module, byte for byte; go
// vet and go test build those files, so the docs cannot drift from the
// package.
func TestTheDocsGoSnippetsAreTheExampleFiles(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "HTTP.md"))
	if os.IsNotExist(err) {
		t.Skip("docs/HTTP.md is not beside this module (a copy of the module alone)")
	}
	if err != nil {
		t.Fatal(err)
	}
	snippet := regexp.MustCompile("(?s)<!-- snippet: (\\S+)[^>]*-->\n```go\n(.*?)```")
	found := snippet.FindAllSubmatch(doc, -1)
	if n := len(regexp.MustCompile("```go\n").FindAll(doc, -1)); n != len(found) || n == 0 {
		t.Fatalf("%d ```go blocks, %d with a snippet marker", n, len(found))
	}
	for _, m := range found {
		file, err := os.ReadFile(filepath.Join(root, string(m[1])))
		if err != nil {
			t.Fatal(err)
		}
		if string(file) != string(m[2]) {
			t.Errorf("docs/HTTP.md's %s differs from the file", m[1])
		}
	}
}
