// Command layers draws a Go module as layers of parts by their imports and
// counts the imports that run back up:
//
//	go run ./internal/layers .
//
// A part is a file of the root package, or a top folder with everything
// under it (cmd/, amqp/, internal/, …). Part A imports part B when a file of
// A uses a name (a type, function, variable, constant, field or method)
// declared in B, or imports a package in B. Tests, testdata, docs and
// examples are left out.
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
	modData, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	module := ""
	for _, line := range strings.Split(string(modData), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			module = f[1]
		}
	}
	if module == "" {
		return nil, fmt.Errorf("%s/go.mod names no module", root)
	}
	dirs := map[string]string{} // import path -> dir
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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
		if top == "docs" || top == "examples" {
			return filepath.SkipDir
		}
		ip := module
		if rel != "." {
			ip = module + "/" + filepath.ToSlash(rel)
		}
		dirs[ip] = path
		return nil
	})
	if err != nil {
		return nil, err
	}

	fset := token.NewFileSet()
	g := &graph{edges: map[[2]string]map[string]bool{}}
	partOf := func(file string) string {
		rel, err := filepath.Rel(root, file)
		if err != nil || strings.HasPrefix(rel, "..") {
			return ""
		}
		rel = filepath.ToSlash(rel)
		if i := strings.Index(rel, "/"); i >= 0 {
			return rel[:i+1]
		}
		return rel
	}
	seen := map[string]bool{}
	addPart := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			g.parts = append(g.parts, p)
		}
	}
	addEdge := func(from, to, name string) {
		if from == "" || to == "" || from == to {
			return
		}
		k := [2]string{from, to}
		if g.edges[k] == nil {
			g.edges[k] = map[string]bool{}
		}
		if name != "" {
			g.edges[k][name] = true
		}
	}

	std := importer.Default()
	checked := map[string]*types.Package{}
	var imp importerFunc
	var check func(ip string) (*types.Package, error)
	imp = func(path string) (*types.Package, error) {
		if _, ok := dirs[path]; ok {
			return check(path)
		}
		if p, err := std.Import(path); err == nil {
			return p, nil
		}
		p := types.NewPackage(path, filepath.Base(path))
		p.MarkComplete()
		return p, nil
	}
	check = func(ip string) (*types.Package, error) {
		if p, ok := checked[ip]; ok {
			if p == nil {
				return nil, fmt.Errorf("import cycle through %s", ip)
			}
			return p, nil
		}
		checked[ip] = nil
		dir := dirs[ip]
		bp, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			var none *build.NoGoError
			if ok := asNoGo(err, &none); ok {
				p := types.NewPackage(ip, filepath.Base(dir))
				p.MarkComplete()
				checked[ip] = p
				return p, nil
			}
			return nil, err
		}
		var files []*ast.File
		for _, name := range bp.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			files = append(files, f)
			addPart(partOf(filepath.Join(dir, name)))
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
		conf := types.Config{Importer: imp, Error: func(error) {}}
		p, _ := conf.Check(ip, fset, files, info)
		checked[ip] = p
		for _, f := range files {
			from := partOf(fset.Position(f.Pos()).Filename)
			for _, is := range f.Imports {
				path := strings.Trim(is.Path.Value, `"`)
				if d, ok := dirs[path]; ok && path != module {
					addEdge(from, partOf(filepath.Join(d, "x.go")), "")
				}
			}
		}
		for id, obj := range info.Uses {
			if obj == nil || obj.Pkg() == nil || !obj.Pos().IsValid() {
				continue
			}
			if _, ok := dirs[obj.Pkg().Path()]; !ok {
				continue
			}
			from := partOf(fset.Position(id.Pos()).Filename)
			to := partOf(fset.Position(obj.Pos()).Filename)
			addEdge(from, to, objName(obj))
		}
		return p, nil
	}
	var ips []string
	for ip := range dirs {
		ips = append(ips, ip)
	}
	sort.Strings(ips)
	for _, ip := range ips {
		if _, err := check(ip); err != nil {
			return nil, err
		}
	}
	sort.Strings(g.parts)
	return g, nil
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func asNoGo(err error, target **build.NoGoError) bool {
	e, ok := err.(*build.NoGoError)
	if ok {
		*target = e
	}
	return ok
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
// imports wherever the imports allow. A greedy order (Eades, Lin and Smyth:
// parts that import nothing left go first, parts nothing left imports
// last, else the part importing least and imported most) is improved by
// moving one part at a time to the place that leaves fewest imports
// running back, while a move lowers the count.
func (g *graph) order() []string {
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
		moved := true
		for moved {
			moved = false
			for _, p := range g.parts {
				if left[p] && count(out[p]) == 0 {
					low = append(low, p)
					delete(left, p)
					moved = true
				}
			}
			for _, p := range g.parts {
				if left[p] && count(in[p]) == 0 {
					high = append(high, p)
					delete(left, p)
					moved = true
				}
			}
		}
		if len(left) == 0 {
			break
		}
		best, bestScore := "", 0
		for _, p := range g.parts {
			if !left[p] {
				continue
			}
			if s := count(in[p]) - count(out[p]); best == "" || s < bestScore {
				best, bestScore = p, s
			}
		}
		// best is imported least for what it imports: it goes high.
		high = append(high, best)
		delete(left, best)
	}
	order := append([]string{}, low...)
	for i := len(high) - 1; i >= 0; i-- {
		order = append(order, high[i])
	}

	backs := func(order []string) int {
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
	cur := backs(order)
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
				if n := backs(cand); n < cur {
					order, cur, improved = cand, n, true
					break
				}
			}
		}
	}
	return order
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
