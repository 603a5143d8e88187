package agentd_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/agentd/agentd"

// TestPackageMap: docs/design.md's table of packages lists exactly the
// packages of the module, and each imports nothing of ours beyond what its
// row's last column allows ("everything", "nothing of ours", or the
// packages named there, before any "never"). Its tests may import what it
// may, itself, the packages whose rows say they are for tests only, and
// the packages its row names after "tests also".
func TestPackageMap(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	imports := goList(t, "{{.ImportPath}} {{join .Imports \" \"}}")
	tests := goList(t, "{{.ImportPath}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}")
	rows := packageRows(t)
	var testOnly []string
	for pkg, r := range rows {
		if r.testOnly {
			testOnly = append(testOnly, pkg)
		}
	}
	for pkg, imps := range imports {
		r, ok := rows[pkg]
		if !ok {
			t.Errorf("package %s is not in docs/design.md's table of packages", pkg)
			continue
		}
		if slices.Contains(r.allowed, "everything") {
			continue
		}
		for _, imp := range imps {
			if !slices.Contains(r.allowed, imp) {
				t.Errorf("%s imports %s, which docs/design.md does not allow it (%v)", pkg, imp, r.allowed)
			}
		}
		for _, imp := range tests[pkg] {
			if imp != pkg && !slices.Contains(r.allowed, imp) && !slices.Contains(testOnly, imp) && !slices.Contains(r.tests, imp) {
				t.Errorf("%s's tests import %s, which docs/design.md does not allow them (%v; tests also %v)",
					pkg, imp, r.allowed, r.tests)
			}
		}
	}
	for pkg := range rows {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("docs/design.md lists %s, which go list does not show", pkg)
		}
	}
}

// goList runs go list with format over the module, which must print a
// package's path and then the paths it imports, and returns for each
// package of ours the packages of ours among those.
func goList(t *testing.T, format string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := short(fields[0])
		imports[pkg] = nil
		for _, imp := range fields[1:] {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				imports[pkg] = append(imports[pkg], short(imp))
			}
		}
	}
	return imports
}

// short names a package of ours as the table does: agentd for the root,
// else its path in the module.
func short(path string) string {
	if path == module {
		return "agentd"
	}
	return strings.TrimPrefix(path, module+"/")
}

// packageRow is what a row of docs/design.md's table of packages allows.
type packageRow struct {
	allowed  []string // what the package may import ("everything": anything)
	tests    []string // what its tests may import beside those
	testOnly bool     // the package is for tests only
}

// packageRows reads the table of docs/design.md's "Packages" section: each
// package and what it may import.
func packageRows(t *testing.T) map[string]packageRow {
	t.Helper()
	f, err := os.Open("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := regexp.MustCompile("`([^`]+)`")
	names := func(s string) []string {
		var out []string
		for _, m := range code.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	rows := map[string]packageRow{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Packages"
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			pkg := strings.Trim(strings.TrimSpace(cells[0]), "`")
			last, tests, _ := strings.Cut(strings.TrimSpace(cells[len(cells)-1]), "tests also")
			last, _, _ = strings.Cut(last, "never")
			r := packageRow{tests: names(tests), testOnly: strings.HasPrefix(strings.TrimSpace(cells[1]), "tests only")}
			switch {
			case strings.HasPrefix(last, "everything"):
				r.allowed = []string{"everything"}
			case strings.HasPrefix(last, "nothing of ours"):
				r.allowed = []string{}
			default:
				r.allowed = names(last)
			}
			rows[pkg] = r
		}
	}
	if len(rows) == 0 {
		t.Fatal("docs/design.md has no table of packages")
	}
	return rows
}

// maxFuncLines is the longest a function may be outside tests and
// cmd/agentbench: past it, a function does more than one thing.
const maxFuncLines = 80

// TestNoLongFunctions: no function of the module's code, tests and
// cmd/agentbench aside, is longer than maxFuncLines.
func TestNoLongFunctions(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" ||
				path == filepath.Join("cmd", "agentbench")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines long, more than %d", fset.Position(fn.Pos()), fn.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
