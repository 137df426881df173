package inference

import (
	"go/ast"
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

// apiLiterals finds in src the comparisons of generate.api with one of its
// values written as a string: `x.API == "tokens"`, `api != "batch"`, and
// `case "chat":` of a switch on such an expression. An expression is
// generate.api's when it is named API or api (a field, a variable).
func apiLiterals(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	values := map[string]bool{}
	for _, a := range APIs() {
		values[string(a)] = true
	}
	isValue := func(e ast.Expr) bool {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return false
		}
		s, err := strconv.Unquote(lit.Value)
		return err == nil && values[s]
	}
	isAPI := func(e ast.Expr) bool {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			return x.Sel.Name == "API"
		case *ast.Ident:
			return x.Name == "api" || x.Name == "API"
		}
		return false
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BinaryExpr:
			if (x.Op == token.EQL || x.Op == token.NEQ) &&
				(isAPI(x.X) && isValue(x.Y) || isAPI(x.Y) && isValue(x.X)) {
				found = append(found, fset.Position(x.Pos()).String())
			}
		case *ast.SwitchStmt:
			if x.Tag == nil || !isAPI(x.Tag) {
				return true
			}
			for _, s := range x.Body.List {
				if slices.ContainsFunc(s.(*ast.CaseClause).List, isValue) {
					found = append(found, fset.Position(s.Pos()).String())
				}
			}
		}
		return true
	})
	return found, nil
}

// generate.api is compared through its type (API's constants and
// methods), never as a string, anywhere in the module.
func TestNoAPIStringComparisons(t *testing.T) {
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found, err := apiLiterals(path, src)
		if err != nil {
			return err
		}
		for _, f := range found {
			t.Errorf("%s: generate.api compared with a string: use inference.API's constants or methods", f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The check finds what it is meant to find and leaves the rest alone.
func TestAPILiterals(t *testing.T) {
	for _, tt := range []struct {
		src  string
		want int
	}{
		{`ok := cfg.Generate.API == "tokens"`, 1},
		{`ok := "batch" != c.API`, 1},
		{`ok := api == "completions"`, 1},
		{"switch cfg.API {\ncase \"chat\", \"tokens\":\n}", 1},
		{`ok := cfg.Generate.API.Tokens()`, 0},
		{`ok := cfg.Generate.API == APITokens`, 0},
		{`ok := mode == "tokens"`, 0},
		{`ok := task.Kind == "chat"`, 0},
		{"switch role {\ncase \"chat\":\n}", 0},
	} {
		src := "package p\nfunc f() {\n" + tt.src + "\n}\n"
		got, err := apiLiterals("x.go", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if len(got) != tt.want {
			t.Errorf("%s: found %v, want %d", tt.src, got, tt.want)
		}
	}
}
