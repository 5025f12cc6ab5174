// Command funclen lists the Go functions of a tree longer than a number of
// lines, tests excepted, longest first, and counts them:
//
//	go run ./internal/funclen -over 80 .
//
// A function's length is its lines from "func" to its closing brace.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type long struct {
	where string
	name  string
	lines int
}

func main() {
	over := flag.Int("over", 80, "list functions longer than this many lines")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	found, err := scan(root, *over)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(1)
	}
	for _, f := range found {
		fmt.Printf("%4d %s %s\n", f.lines, f.where, f.name)
	}
	fmt.Printf("%d functions over %d lines\n", len(found), *over)
}

// scan parses every non-test .go file under root (node_modules, testdata
// and hidden folders left out) and returns its functions over the limit.
func scan(root string, over int) ([]long, error) {
	var found []long
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > over {
				found = append(found, long{fmt.Sprintf("%s:%d", path, start.Line), funcName(fn), n})
			}
		}
		return nil
	})
	sort.SliceStable(found, func(i, j int) bool { return found[i].lines > found[j].lines })
	return found, err
}

// funcName is "Recv.Name" for a method, "Name" for a function.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	if idx, ok := t.(*ast.IndexListExpr); ok {
		t = idx.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
