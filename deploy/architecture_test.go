package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/architecture.md's package table is the map of record: every package
// of the module is in it, each row's imports are what the package imports
// of ours (go list), and the graph runs downward (a package imports only
// packages of the rows above it).
func TestArchitectureTable(t *testing.T) {
	root := filepath.Join("..")
	rows := architectureRows(t, filepath.Join(root, "docs", "architecture.md"))
	imports := ourImports(t, root)

	seen := map[string]int{} // package -> its row
	for i, r := range rows {
		for _, p := range r.pkgs {
			seen[p] = i
		}
	}
	for pkg := range imports {
		if _, ok := rowOf(seen, pkg); !ok {
			t.Errorf("package %s is not in docs/architecture.md's table", pkg)
		}
	}
	for i, r := range rows {
		for _, p := range r.pkgs {
			if strings.HasSuffix(p, "/...") {
				continue
			}
			got, ok := imports[p]
			if !ok {
				t.Errorf("the table names %s, which is no package", p)
				continue
			}
			if r.imports != nil && !slices.Equal(shortNames(got), r.imports) {
				t.Errorf("%s imports %v of ours; the table says %v", p, shortNames(got), r.imports)
			}
			for _, imp := range got {
				if j, ok := rowOf(seen, imp); ok && j >= i && !strings.HasPrefix(imp, p+"/") && !strings.HasPrefix(p, imp) {
					t.Errorf("%s (row %d) imports %s (row %d): the graph must run downward", p, i+1, imp, j+1)
				}
			}
		}
	}
}

type archRow struct {
	pkgs    []string // module-relative paths; "x/..." for a tree
	imports []string // short names, sorted; nil: not a list ("everything above")
}

func architectureRows(t *testing.T, path string) []archRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := regexp.MustCompile("`([^`]+)`")
	var rows []archRow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) != 5 || !strings.Contains(cells[1], "`") {
			continue
		}
		var r archRow
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			r.pkgs = append(r.pkgs, strings.TrimSuffix(m[1], "/"))
		}
		switch imp := strings.TrimSpace(cells[3]); {
		case imp == "—":
			r.imports = []string{}
		case strings.Contains(imp, " "+"above"):
			r.imports = nil
		default:
			for _, n := range strings.Split(imp, ",") {
				r.imports = append(r.imports, strings.TrimSpace(n))
			}
			slices.Sort(r.imports)
		}
		rows = append(rows, r)
	}
	if len(rows) < 10 {
		t.Fatalf("read %d rows from %s: is the table there?", len(rows), path)
	}
	return rows
}

// ourImports maps each non-test package of the module (module-relative
// path) to the module's packages it imports.
func ourImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/bulkhead-mesh/bulkhead/"
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		if strings.HasPrefix(pkg, "e2e") || strings.HasPrefix(pkg, "deploy") || strings.HasPrefix(pkg, "proto/") ||
			pkg == "github.com/bulkhead-mesh/bulkhead" {
			continue
		}
		var ours []string
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				ours = append(ours, strings.TrimPrefix(imp, module))
			}
		}
		m[pkg] = ours
	}
	return m
}

// rowOf finds the row of pkg: its own, or that of a tree holding it.
func rowOf(rows map[string]int, pkg string) (int, bool) {
	if i, ok := rows[pkg]; ok {
		return i, true
	}
	for p, i := range rows {
		if tree, ok := strings.CutSuffix(p, "/..."); ok && (pkg == tree || strings.HasPrefix(pkg, tree+"/")) {
			return i, true
		}
	}
	if strings.HasPrefix(pkg, "proto/") {
		return -1, true // generated; above everything
	}
	return 0, false
}

// shortNames are the table's names of imports: the last element of a
// package under pkg/ or cmd/ (admission/admissiontest keeps its parent),
// "proto" for generated code.
func shortNames(imports []string) []string {
	var out []string
	for _, p := range imports {
		switch {
		case strings.HasPrefix(p, "proto/"):
			p = "proto"
		default:
			p = strings.TrimPrefix(strings.TrimPrefix(p, "pkg/"), "cmd/")
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
