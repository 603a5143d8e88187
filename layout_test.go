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
// packages named there, before any "never").
func TestPackageMap(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
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
	rows := packageRows(t)
	for pkg, imps := range imports {
		allowed, ok := rows[pkg]
		if !ok {
			t.Errorf("package %s is not in docs/design.md's table of packages", pkg)
			continue
		}
		if slices.Contains(allowed, "everything") {
			continue
		}
		for _, imp := range imps {
			if !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s, which docs/design.md does not allow it (%v)", pkg, imp, allowed)
			}
		}
	}
	for pkg := range rows {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("docs/design.md lists %s, which go list does not show", pkg)
		}
	}
}

// short names a package of ours as the table does: agentd for the root,
// else its path in the module.
func short(path string) string {
	if path == module {
		return "agentd"
	}
	return strings.TrimPrefix(path, module+"/")
}

// packageRows reads the table of docs/design.md's "Packages" section: each
// package and what it may import.
func packageRows(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code := regexp.MustCompile("`([^`]+)`")
	rows := map[string][]string{}
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
			last := strings.TrimSpace(cells[len(cells)-1])
			last, _, _ = strings.Cut(last, "never")
			var allowed []string
			switch {
			case strings.HasPrefix(last, "everything"):
				allowed = []string{"everything"}
			case strings.HasPrefix(last, "nothing of ours"):
				allowed = []string{}
			default:
				for _, m := range code.FindAllStringSubmatch(last, -1) {
					allowed = append(allowed, m[1])
				}
			}
			rows[pkg] = allowed
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
