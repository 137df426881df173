package inference

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// apiConstants finds in src the comparisons with one of generate.api's
// constants (APIChat, inference.APITokens, ...): `x == APISGLang`,
// `api != inference.APICompletions`, `case inference.APIBatch:`.
func apiConstants(path string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{"APIChat": true, "APICompletions": true, "APITokens": true, "APIBatch": true, "APISGLang": true}
	isConst := func(e ast.Expr) bool {
		switch x := e.(type) {
		case *ast.Ident:
			return names[x.Name]
		case *ast.SelectorExpr:
			return names[x.Sel.Name]
		}
		return false
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.BinaryExpr:
			if (x.Op == token.EQL || x.Op == token.NEQ) && (isConst(x.X) || isConst(x.Y)) {
				found = append(found, fset.Position(x.Pos()).String())
			}
		case *ast.CaseClause:
			if slices.ContainsFunc(x.List, isConst) {
				found = append(found, fset.Position(x.Pos()).String())
			}
		}
		return true
	})
	return found, nil
}

// What an API can do is asked of its registered protocol (API.Caps),
// never found by comparing it with a value, anywhere in the module
// (docs/architecture.md, "Where a new engine protocol goes").
func TestNoAPIConstantComparisons(t *testing.T) {
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
		found, err := apiConstants(path, src)
		if err != nil {
			return err
		}
		for _, f := range found {
			t.Errorf("%s: generate.api compared with a value: ask its protocol (API.Caps)", f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The check finds what it is meant to find and leaves the rest alone.
func TestAPIConstants(t *testing.T) {
	for _, tt := range []struct {
		src  string
		want int
	}{
		{`ok := cfg.API == inference.APISGLang`, 1},
		{`ok := APICompletions != api`, 1},
		{"switch api {\ncase inference.APIChat, inference.APITokens:\n}", 1},
		{`ok := cfg.API.Caps().TextPrompt`, 0},
		{`cfg.API = inference.APITokens`, 0},
		{`x := []API{APIChat}`, 0},
	} {
		src := "package p\nfunc f() {\n" + tt.src + "\n}\n"
		got, err := apiConstants("x.go", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if len(got) != tt.want {
			t.Errorf("%s: found %v, want %d", tt.src, got, tt.want)
		}
	}
}
