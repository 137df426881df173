package schema_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/schema"
)

// fileNames are the output directory's file names and the Parquet
// metadata keys: no string literal outside schema equals one, or ends in
// one as a path's last element.
var fileNames = []string{
	schema.RejectsFile, schema.FailuresFile, schema.MetricsFile, schema.InputsFile,
	schema.AggregateMetricsFile, schema.ServerAggregateMetricsFile, schema.ManifestFile,
	schema.ShardStatusFile, schema.LockFile, schema.SecretKeyFile, schema.ReportFile,
	schema.PartGlob, schema.JSONLPrefix, "%05d-of-%05d",
	schema.MetadataKey, schema.StepsMetadataKey, schema.KeyVersion, schema.KeyConfigFingerprint,
	schema.KeyRunID, schema.KeyModel, schema.KeySamplingParams, schema.KeyConfig, schema.KeySource,
	schema.KeyPrice, schema.ServeStateFile, schema.ServeLockFile, schema.KeyServedStep, schema.PartName(0),
	schema.BatchStateFile,
}

// strictExempt are the folders under the module's root (each with the
// packages below it) that the strict check leaves out, and why. Every
// other package names columns and temporary files only through schema:
// no literal there is a column's or a struct field's name given to a
// function that looks columns up (FieldIndices, Fields, …), and none
// holds schema.TempSuffix. A folder is left out only where the layering
// rules (docs/architecture.md, TestLayers) keep it from importing schema:
// the floors pipeline, storage and internal/durable import nothing of
// schema (nothing of trajflow's at all), and inference/cache imports only
// pipeline, inference and internal/durable. The other packages that may
// not import schema (sources, envs, config, inference/openai, …) are
// checked and hold no such literal; a file they write atomically goes
// through internal/durable, which names it.
var strictExempt = map[string]string{
	"pipeline":         "the data model: it imports nothing of trajflow's",
	"storage":          "the S3 client and the staging mirror import nothing of trajflow's; the mirror knows temporary files by their names",
	"internal/durable": "the floor every writer uses imports nothing of trajflow's; its .NAME.tmp-RANDOM is the name TempSuffix describes",
	"inference/cache":  "a decorator of an inference client imports pipeline, inference and internal/durable only; its .tmp-RANDOM entries are the cache directory's, not the output directory's",
}

// strict reports whether the strict check covers the package in folder
// rel (slash-separated, relative to the module's root).
func strict(rel string) bool {
	for dir := range strictExempt {
		if rel == dir || strings.HasPrefix(rel, dir+"/") {
			return false
		}
	}
	return true
}

// columnFuncs look columns or struct fields up by name.
var columnFuncs = map[string]bool{
	"FieldIndices": true, "FieldByName": true, "FieldIdx": true, "Fields": true, "ColumnByName": true,
}

// columnNames are the names of the output tables' columns and of their
// struct columns' fields.
func columnNames() map[string]bool {
	names := map[string]bool{}
	var add func(t arrow.DataType)
	add = func(t arrow.DataType) {
		switch t := t.(type) {
		case *arrow.ListType:
			add(t.Elem())
		case *arrow.StructType:
			for _, f := range t.Fields() {
				names[f.Name] = true
				add(f.Type)
			}
		}
	}
	for _, cols := range [][]schema.Column{schema.Columns(), schema.MessageFields(), schema.StepColumns()} {
		for _, c := range cols {
			names[c.Name] = true
			add(c.Type)
		}
	}
	delete(names, "element") // the LIST layout's element, not a column
	return names
}

// strictLiterals returns "FILE:LINE: LITERAL" for each string literal of
// src that is a column's name given to a function that looks columns up,
// or that holds schema.TempSuffix.
func strictLiterals(name string, src []byte, columns map[string]bool) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ImportSpec:
			return false
		case *ast.CallExpr:
			if columnFuncs[funcName(n.Fun)] {
				for _, a := range n.Args {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if v, err := strconv.Unquote(lit.Value); err == nil && columns[v] {
							found = append(found, fset.Position(lit.Pos()).String()+": "+lit.Value)
						}
					}
				}
			}
		case *ast.BasicLit:
			if v, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && strings.Contains(v, schema.TempSuffix) {
				found = append(found, fset.Position(n.Pos()).String()+": "+n.Value)
			}
		}
		return true
	})
	return found, nil
}

// dirNames are the output directory's folder names. They are common
// words ("data", "errors"), so a literal is flagged only where it names a
// path: a path segment of a literal ("data/", "/steps"), an argument of a
// call that takes paths (filepath.Join, os.MkdirAll, …), a comparison
// with a filepath.Base, the value of a constant named …Dir, or an element
// or key of a composite literal that holds two folder names or more (a
// list of folders: {"data", "errors"}).
var dirNames = []string{
	schema.DataDir, schema.FilteredDir, schema.StepsDir, schema.SurplusDir, schema.ErrorsDir,
	schema.ImagesDir, schema.JSONLDir, schema.OpenAIBatchDir, schema.ShardsDir, schema.ServedDir,
	schema.EvalDir, schema.ReplayDir,
}

// pathFuncs take path elements as arguments.
var pathFuncs = map[string]bool{
	"Join": true, "Glob": true, "MkdirAll": true, "Mkdir": true, "ReadDir": true, "Stat": true,
	"Lstat": true, "Open": true, "OpenFile": true, "Create": true, "CreateTemp": true, "ReadFile": true,
	"WriteFile": true, "Remove": true, "RemoveAll": true, "Rename": true, "CreateNext": true,
	"CopyDir": true, "ShardDir": true, "Dir": true, "Base": true,
}

func funcName(e ast.Expr) string {
	switch f := e.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// layoutLiterals returns "FILE:LINE: LITERAL" for each string literal of
// src that names a part of the output directory.
func layoutLiterals(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var found []string
	flag := func(lit *ast.BasicLit) {
		found = append(found, fset.Position(lit.Pos()).String()+": "+lit.Value)
	}
	isDir := func(v string) bool {
		for _, d := range dirNames {
			if v == d {
				return true
			}
		}
		return false
	}
	check := func(lit *ast.BasicLit, pathContext bool) {
		v, err := strconv.Unquote(lit.Value)
		if err != nil {
			return
		}
		for _, n := range fileNames {
			if v == n || strings.HasSuffix(v, "/"+n) {
				flag(lit)
				return
			}
		}
		// A path has no spaces (help texts describe the layout in words)
		// and is no media type (application/jsonl) or HTTP route
		// (/v1/steps/next).
		path := !strings.ContainsAny(v, " \t\n") && !strings.HasPrefix(v, "application/") && !strings.HasPrefix(v, "text/") && !strings.HasPrefix(v, "/v1/")
		for _, d := range dirNames {
			if path && (strings.HasPrefix(v, d+"/") || strings.Contains(v, "/"+d+"/") || strings.HasSuffix(v, "/"+d)) {
				flag(lit)
				return
			}
		}
		if pathContext && isDir(v) {
			flag(lit)
		}
	}
	strLit := func(e ast.Expr) *ast.BasicLit {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			return lit
		}
		return nil
	}
	seen := map[*ast.BasicLit]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ImportSpec:
			seen[n.Path] = true
		case *ast.Field:
			// Struct tags (json:"data") are not paths.
			if n.Tag != nil {
				seen[n.Tag] = true
			}
		case *ast.CallExpr:
			if pathFuncs[funcName(n.Fun)] {
				for _, a := range n.Args {
					if lit := strLit(a); lit != nil {
						seen[lit] = true
						check(lit, true)
					}
				}
			}
		case *ast.BinaryExpr:
			if n.Op == token.EQL || n.Op == token.NEQ {
				for _, pair := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
					if c, ok := pair[1].(*ast.CallExpr); ok && (funcName(c.Fun) == "Base" || funcName(c.Fun) == "Dir") {
						if lit := strLit(pair[0]); lit != nil {
							seen[lit] = true
							check(lit, true)
						}
					}
				}
			}
		case *ast.ValueSpec:
			for i, id := range n.Names {
				if i < len(n.Values) && (strings.HasSuffix(id.Name, "Dir") || strings.HasSuffix(id.Name, "Subdir")) {
					if lit := strLit(n.Values[i]); lit != nil {
						seen[lit] = true
						check(lit, true)
					}
				}
			}
		case *ast.CompositeLit:
			var dirs []*ast.BasicLit
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					e = kv.Key
				}
				if lit := strLit(e); lit != nil {
					if v, err := strconv.Unquote(lit.Value); err == nil && isDir(v) {
						dirs = append(dirs, lit)
					}
				}
			}
			if len(dirs) >= 2 {
				for _, lit := range dirs {
					seen[lit] = true
					flag(lit)
				}
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && !seen[n] {
				check(n, false)
			}
		}
		return true
	})
	return found, nil
}

// No output folder or file name, and no metadata key, is a string literal
// in a non-test Go file of the module outside the schema package's own
// files (schema/shards and schema/internal/gen are checked): every package
// names them with schema's constants.
func TestNoLayoutLiteralsOutsideSchema(t *testing.T) {
	root := ".."
	columns := columnNames()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || d.Name() == "vendor" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		// schema's own files define the names; the packages below it
		// (schema/shards, schema/internal/gen) use them like any other.
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == filepath.Join(root, "schema") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found, err := layoutLiterals(path, src)
		if err != nil {
			return err
		}
		for _, f := range found {
			t.Errorf("%s: an output directory name as a literal: use schema's constant", f)
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if !strict(filepath.ToSlash(filepath.Dir(rel))) {
			return nil
		}
		found, err = strictLiterals(path, src, columns)
		if err != nil {
			return err
		}
		for _, f := range found {
			t.Errorf("%s: a column name or a temporary name as a literal: use schema's (ColumnName, TempName)", f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// An exemption names a folder that is there, so the list cannot go
	// stale.
	for dir := range strictExempt {
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(dir))); err != nil || !fi.IsDir() {
			t.Errorf("strictExempt names %s, which is no folder of the module", dir)
		}
	}
}

// The strict check finds column names given to look-ups and temporary
// names, and leaves other uses of the same words alone.
func TestStrictLiterals(t *testing.T) {
	columns := columnNames()
	for _, tt := range []struct {
		src  string
		want int
	}{
		{`i := sc.FieldIndices("task_index")`, 1},
		{`cols, _ := f.Fields("group_id", "kept")`, 2},
		{`i, _ := st.FieldIdx("version")`, 1},
		{`i := sc.FieldIndices(schema.ColumnName(schema.ColTaskIndex))`, 0},
		{`tmp := "." + name + ".tmp"`, 1},
		{`tmp := schema.TempName(name)`, 0},
		{`m := map[string]any{"reward": 1}`, 0},
		{`e := fmt.Errorf("no task_index column")`, 0},
	} {
		src := "package p\nfunc f() {\n" + tt.src + "\n}\n"
		got, err := strictLiterals("x.go", []byte(src), columns)
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if len(got) != tt.want {
			t.Errorf("%s: found %v, want %d", tt.src, got, tt.want)
		}
	}
	for rel, want := range map[string]bool{
		"serve": true, "runner/commit": true, "runner/analyze": true, "bench/serve": true,
		"internal/durable": false, "pipeline/pipelinetest": false, "storage": false, "inference/cache": false,
		"internal/durablex": true, "inference": true,
	} {
		if got := strict(rel); got != want {
			t.Errorf("strict(%q) = %v, want %v", rel, got, want)
		}
	}
	for _, name := range []string{"task_index", "attempt", "policy_versions", "version", "role"} {
		if !columns[name] {
			t.Errorf("%s is not among the column names", name)
		}
	}
}

// The check finds the literals it is meant to find and leaves JSON keys,
// struct tags and words alone.
func TestLayoutLiterals(t *testing.T) {
	for _, tt := range []struct {
		src  string
		want int
	}{
		{`p := filepath.Join(dir, "data")`, 1},
		{`p := filepath.Join(dir, "steps", name)`, 1},
		{`g, _ := filepath.Glob(filepath.Join(dir, "data", "part-*.parquet"))`, 2},
		{`ok := filepath.Base(dir) != "data"`, 1},
		{`p := dir + "/images/x.png"`, 1},
		{`p := "shards/"`, 1},
		{`f := "failures.jsonl"`, 1},
		{`k := "trajflow.run_id"`, 1},
		{`m := map[string]any{"data": 1}`, 0},
		{`s := status["filtered"]`, 0},
		{`counter(d, 1, "filtered")`, 0},
		{`const StatusFiltered = "filtered"`, 0},
		{`const FilteredDir = "filtered"`, 1},
		{`type T struct { Data []int ` + "`json:\"data\"`" + ` }`, 0},
		{`e := errors.New("no data")`, 0},
		{`u := "usage: writes OUTPUT/shards/NAME/"`, 0},
		{`c := "application/jsonl"`, 0},
		{`p := filepath.Join(dir, schema.DataDir)`, 0},
		{`ks := []string{"data", "filtered", "surplus", "errors"}`, 4},
		{`m := map[string]int{"data": 1, "errors": 2}`, 2},
		{`m := map[string]any{"object": "list", "data": rows}`, 0},
		{`ks := []string{schema.DataDir, schema.ErrorsDir}`, 0},
	} {
		src := "package p\n"
		if strings.HasPrefix(tt.src, "const") || strings.HasPrefix(tt.src, "type") {
			src += tt.src + "\n"
		} else {
			src += "func f() {\n" + tt.src + "\n}\n"
		}
		got, err := layoutLiterals("x.go", []byte(src))
		if err != nil {
			t.Fatalf("%s: %v", tt.src, err)
		}
		if len(got) != tt.want {
			t.Errorf("%s: found %v, want %d", tt.src, got, tt.want)
		}
	}
}
