package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLayersOfALoop: three files of a root package that use each other in
// a loop (a -> b -> c -> a) and a folder that imports the package: four
// parts, four imports, one of the loop's running back up, the folder on
// top. Tests and docs are no parts.
func TestLayersOfALoop(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":      "module example.com/m\n\ngo 1.22\n",
		"a.go":        "package m\n\nfunc A() { B() }\n\nfunc A2() {}\n",
		"b.go":        "package m\n\nfunc B() { C() }\n",
		"c.go":        "package m\n\nfunc C() { A2() }\n",
		"a_test.go":   "package m\n\nfunc helper() { C() }\n",
		"sub/x.go":    "package sub\n\nimport \"example.com/m\"\n\nfunc X() { m.A() }\n",
		"docs/doc.go": "package docs\n\nimport \"example.com/m\"\n\nfunc D() { m.B() }\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g, err := load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a.go", "b.go", "c.go", "sub/"}; !slices.Equal(g.parts, want) {
		t.Fatalf("parts %v, want %v", g.parts, want)
	}
	if len(g.edges) != 4 {
		t.Fatalf("imports %v, want a->b, b->c, c->a, sub/->a", g.edges)
	}
	if names := g.edges[[2]string{"c.go", "a.go"}]; !names["A2"] || len(names) != 1 {
		t.Errorf("c.go -> a.go uses %v, want A2", names)
	}
	floor, back := g.layers(g.order())
	if len(back) != 1 {
		t.Fatalf("back up %v, want one import of the loop", back)
	}
	for _, p := range []string{"a.go", "b.go", "c.go"} {
		if floor["sub/"] <= floor[p] {
			t.Errorf("sub/ on layer %d, not above %s on %d", floor["sub/"], p, floor[p])
		}
	}
}

// TestTestPackagesOnlyInTests: no file of the module but a _test.go file
// or one of testOnly's own imports a package of testOnly.
func TestTestPackagesOnlyInTests(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	module, err := moduleName(root)
	if err != nil {
		t.Fatal(err)
	}
	banned := map[string]bool{}
	for _, p := range testOnly {
		banned[module+"/internal/"+p] = true
	}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if isTestOnly(filepath.ToSlash(filepath.Dir(rel))) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, is := range f.Imports {
			if ip, _ := strconv.Unquote(is.Path.Value); banned[ip] {
				t.Errorf("%s imports %s, which only tests may import", rel, ip)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
