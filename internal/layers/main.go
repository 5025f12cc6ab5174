// Command layers draws a Go module as layers of parts by their imports and
// counts the imports that run back up:
//
//	go run ./internal/layers .
//
// A part is a file of the root package, or a top folder with everything
// under it (cmd/, amqp/, internal/, …). Part A imports part B when a file of
// A uses a name (a type, function, variable, constant, field or method)
// declared in B, or imports a package in B. Tests, the packages only tests
// import (testOnly), testdata, docs and examples are left out.
//
// The parts are laid out in an order that leaves as few imports as it can
// find running against it (a greedy order, then single moves while they
// lower the count); a part stands one layer above the highest part it
// imports along the order, the parts that import nothing on layer 1. An
// import from a part to one on its own layer or higher runs back up. It
// prints the layers from the top down, then each import that runs back up
// with the names it uses, then the count.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/layers [module root]")
		flag.PrintDefaults()
	}
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	g, err := load(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(1)
	}
	order := g.order()
	floor, back := g.layers(order)
	print(g, floor, back)
}

// graph is the parts and the imports between them, with the names each
// import uses.
type graph struct {
	parts []string
	edges map[[2]string]map[string]bool
}

// load type-checks every package of the module under root (external
// imports from their export data, or as empty packages when it cannot be
// found: a name of theirs is no import of ours) and records which part
// uses what from which.
func load(root string) (*graph, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	module, err := moduleName(root)
	if err != nil {
		return nil, err
	}
	dirs, err := packageDirs(root, module)
	if err != nil {
		return nil, err
	}
	l := &loader{
		root: root, module: module, dirs: dirs,
		fset: token.NewFileSet(), std: importer.Default(),
		checked: map[string]*types.Package{}, seen: map[string]bool{},
		g: &graph{edges: map[[2]string]map[string]bool{}},
	}
	var ips []string
	for ip := range dirs {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	for _, ip := range ips {
		if _, err := l.check(ip); err != nil {
			return nil, err
		}
	}
	sort.Strings(l.g.parts)
	return l.g, nil
}

// moduleName reads the module's path from root/go.mod.
func moduleName(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s/go.mod names no module", root)
}

// testOnly are the packages under internal/ that only _test.go files
// import: rigs, locks and bounds for tests (TestTestPackagesOnlyInTests
// holds the module to that).
var testOnly = []string{"brokertest", "pgtest", "simrig", "tasktest", "testbound", "testlock"}

// packageDirs maps the import path of every folder under root that is
// measured to the folder.
func packageDirs(root, module string) (map[string]string, error) {
	dirs := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			name == "testdata" || name == "node_modules" || name == "vendor") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		top := strings.Split(filepath.ToSlash(rel), "/")[0]
		if top == "docs" || top == "examples" || isTestOnly(filepath.ToSlash(rel)) {
			return filepath.SkipDir
		}
		ip := module
		if rel != "." {
			ip = module + "/" + filepath.ToSlash(rel)
		}
		dirs[ip] = path
		return nil
	})
	return dirs, err
}

// isTestOnly reports whether the folder rel (slashed, from the module's
// root) is one of testOnly's.
func isTestOnly(rel string) bool {
	for _, p := range testOnly {
		if rel == "internal/"+p {
			return true
		}
	}
	return false
}

// loader type-checks the module's packages, each once, and adds to g
// what each file uses.
type loader struct {
	root, module string
	dirs         map[string]string // import path -> folder
	fset         *token.FileSet
	std          types.Importer
	checked      map[string]*types.Package // nil while being checked
	seen         map[string]bool           // parts in g
	g            *graph
}

// Import is types.Importer: the module's packages checked from source,
// the others from export data or empty.
func (l *loader) Import(path string) (*types.Package, error) {
	if _, ok := l.dirs[path]; ok {
		return l.check(path)
	}
	if p, err := l.std.Import(path); err == nil {
		return p, nil
	}
	p := types.NewPackage(path, filepath.Base(path))
	p.MarkComplete()
	return p, nil
}

// partOf is the part of a file: its path from the root in the root
// folder, else its top folder with a slash; "" outside the root.
func (l *loader) partOf(file string) string {
	rel, err := filepath.Rel(l.root, file)
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	rel = filepath.ToSlash(rel)
	if i := strings.Index(rel, "/"); i >= 0 {
		return rel[:i+1]
	}
	return rel
}

func (l *loader) addEdge(from, to, name string) {
	if from == "" || to == "" || from == to {
		return
	}
	k := [2]string{from, to}
	if l.g.edges[k] == nil {
		l.g.edges[k] = map[string]bool{}
	}
	if name != "" {
		l.g.edges[k][name] = true
	}
}

// check type-checks the package ip and records its files' imports and
// uses.
func (l *loader) check(ip string) (*types.Package, error) {
	if p, ok := l.checked[ip]; ok {
		if p == nil {
			return nil, fmt.Errorf("import cycle through %s", ip)
		}
		return p, nil
	}
	l.checked[ip] = nil
	dir := l.dirs[ip]
	bp, err := build.Default.ImportDir(dir, 0)
	if _, none := err.(*build.NoGoError); none {
		p := types.NewPackage(ip, filepath.Base(dir))
		p.MarkComplete()
		l.checked[ip] = p
		return p, nil
	}
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(l.fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		if part := l.partOf(filepath.Join(dir, name)); part != "" && !l.seen[part] {
			l.seen[part] = true
			l.g.parts = append(l.g.parts, part)
		}
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: l, Error: func(error) {}}
	p, _ := conf.Check(ip, l.fset, files, info)
	l.checked[ip] = p
	for _, f := range files {
		from := l.partOf(l.fset.Position(f.Pos()).Filename)
		for _, is := range f.Imports {
			path := strings.Trim(is.Path.Value, `"`)
			if d, ok := l.dirs[path]; ok && path != l.module {
				l.addEdge(from, l.partOf(filepath.Join(d, "x.go")), "")
			}
		}
	}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() == nil || !obj.Pos().IsValid() {
			continue
		}
		if _, ok := l.dirs[obj.Pkg().Path()]; !ok {
			continue
		}
		l.addEdge(l.partOf(l.fset.Position(id.Pos()).Filename), l.partOf(l.fset.Position(obj.Pos()).Filename), objName(obj))
	}
	return p, nil
}

// objName names a used object as its declaration reads: Type.Method for a
// method, Type.field for a field where the struct is named, else the name.
func objName(obj types.Object) string {
	if f, ok := obj.(*types.Func); ok {
		if recv := f.Signature().Recv(); recv != nil {
			t := recv.Type()
			if p, ok := t.(*types.Pointer); ok {
				t = p.Elem()
			}
			if n, ok := t.(*types.Named); ok {
				return n.Obj().Name() + "." + f.Name()
			}
		}
	}
	return obj.Name()
}

// order returns the parts from the ground up: each part after what it
// imports wherever the imports allow. A greedy order (Eades, Lin and Smyth)
// is improved by moving one part at a time to the place that leaves
// fewest imports running back, while a move lowers the count.
func (g *graph) order() []string {
	order := g.greedy()
	cur := g.backs(order)
	for improved := true; improved; {
		improved = false
		for i := range order {
			p := order[i]
			rest := append(append([]string{}, order[:i]...), order[i+1:]...)
			for j := 0; j <= len(rest); j++ {
				if j == i {
					continue
				}
				cand := append(append(append([]string{}, rest[:j]...), p), rest[j:]...)
				if n := g.backs(cand); n < cur {
					order, cur, improved = cand, n, true
					break
				}
			}
		}
	}
	return order
}

// greedy orders the parts from the ground up: those that import nothing
// left go low, those nothing left imports go high, and when neither is
// left the part imported least for what it imports goes high.
func (g *graph) greedy() []string {
	out := map[string][]string{} // what a part imports
	in := map[string][]string{}  // who imports a part
	for k := range g.edges {
		out[k[0]] = append(out[k[0]], k[1])
		in[k[1]] = append(in[k[1]], k[0])
	}
	left := map[string]bool{}
	for _, p := range g.parts {
		left[p] = true
	}
	count := func(list []string) int {
		n := 0
		for _, x := range list {
			if left[x] {
				n++
			}
		}
		return n
	}
	var low, high []string
	for len(left) > 0 {
		for moved := true; moved; {
			moved = false
			for _, p := range g.parts {
				if left[p] && count(out[p]) == 0 {
					low, moved = append(low, p), true
					delete(left, p)
				}
			}
			for _, p := range g.parts {
				if left[p] && count(in[p]) == 0 {
					high, moved = append(high, p), true
					delete(left, p)
				}
			}
		}
		best, bestScore := "", 0
		for _, p := range g.parts {
			if s := count(in[p]) - count(out[p]); left[p] && (best == "" || s < bestScore) {
				best, bestScore = p, s
			}
		}
		if best != "" {
			high = append(high, best)
			delete(left, best)
		}
	}
	order := low
	for i := len(high) - 1; i >= 0; i-- {
		order = append(order, high[i])
	}
	return order
}

// backs counts the imports that run against order.
func (g *graph) backs(order []string) int {
	pos := map[string]int{}
	for i, p := range order {
		pos[p] = i
	}
	n := 0
	for k := range g.edges {
		if pos[k[1]] > pos[k[0]] {
			n++
		}
	}
	return n
}

// layers puts each part one layer above the highest part it imports that
// stands before it in order, and returns the imports that run back up.
func (g *graph) layers(order []string) (map[string]int, [][2]string) {
	pos := map[string]int{}
	for i, p := range order {
		pos[p] = i
	}
	floor := map[string]int{}
	for _, p := range order {
		floor[p] = 1
		for k := range g.edges {
			if k[0] == p && pos[k[1]] < pos[p] && floor[k[1]]+1 > floor[p] {
				floor[p] = floor[k[1]] + 1
			}
		}
	}
	var back [][2]string
	for k := range g.edges {
		if floor[k[1]] >= floor[k[0]] {
			back = append(back, k)
		}
	}
	sort.Slice(back, func(i, j int) bool {
		if back[i][0] != back[j][0] {
			return back[i][0] < back[j][0]
		}
		return back[i][1] < back[j][1]
	})
	return floor, back
}

func print(g *graph, floor map[string]int, back [][2]string) {
	top := 0
	for _, f := range floor {
		top = max(top, f)
	}
	for f := top; f >= 1; f-- {
		var on []string
		for _, p := range g.parts {
			if floor[p] == f {
				on = append(on, p)
			}
		}
		fmt.Printf("layer %2d: %s\n", f, strings.Join(on, " "))
	}
	for _, k := range back {
		var names []string
		for n := range g.edges[k] {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) > 6 {
			names = append(names[:6], fmt.Sprintf("… %d more", len(names)-6))
		}
		fmt.Printf("up: %s (%d) -> %s (%d): %s\n", k[0], floor[k[0]], k[1], floor[k[1]], strings.Join(names, ", "))
	}
	fmt.Printf("%d parts on %d layers, %d imports, %d running back up\n", len(g.parts), top, len(g.edges), len(back))
}
