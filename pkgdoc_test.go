package belay_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOnePackageDoc checks that every package has exactly one package doc
// comment (STYLE.md: layout and names).
func TestOnePackageDoc(t *testing.T) {
	t.Parallel()
	docs := map[string][]string{} // dir -> files with a package doc
	pkgs := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		pkgs[dir] = true
		if f.Doc != nil {
			docs[dir] = append(docs[dir], filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range pkgs {
		if n := len(docs[dir]); n != 1 {
			t.Errorf("package %s has %d package doc comments (%v); want exactly one", dir, n, docs[dir])
		}
	}
}
