package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/pipeline"
)

// ReferencePath is where the reference goes, relative to the module root.
const ReferencePath = "docs/config.md"

// modulePath is the module's import path.
const modulePath = "github.com/trajflow/trajflow"

// Key is one config key of the reference.
type Key struct {
	Name    string // the full dotted name: source.shard.index
	Type    string // in the reference's words: string, integer, duration, …
	Default string // markdown: a value in backquotes, or words
	Doc     string // markdown: the field's doc comment, one paragraph
}

// Section is one top-level section of the config (run, source, …), or one
// environment's options.
type Section struct {
	Name string
	Doc  string
	Keys []Key
}

// Model is everything the reference says: the config's sections in the
// order config.Config declares them, then each built-in environment's own
// options.
type Model struct {
	Sections []Section
	Envs     []EnvOptions
}

// EnvOptions is one built-in environment's own keys (the env section's
// keys beside name, or a route's).
type EnvOptions struct {
	Name        string // the registered name: math, subprocess, …
	Package     string // the package's path in the module: envs/math
	Type        string // the options' Go type: Options or Config
	Keys        []Key
	Operational []string // the keys that may change on resume
	Secret      []string // the keys redacted everywhere
}

// Reference renders the reference of the module at root.
func Reference(root string) ([]byte, error) {
	m, err := Build(root)
	if err != nil {
		return nil, err
	}
	return Render(m), nil
}

// Build reads the config's types and the sources' doc comments.
func Build(root string) (*Model, error) {
	d := &docs{root: root, pkgs: map[string]*pkgDocs{}}
	var cfg config.Config
	cfg.SetDefaults()
	v := reflect.ValueOf(cfg)
	t := v.Type()
	var m Model
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, inline, skip := yamlName(f)
		if skip {
			continue
		}
		if inline || f.Type.Kind() != reflect.Struct {
			return nil, fmt.Errorf("config.Config.%s: a section must be a struct with its own key", f.Name)
		}
		doc, _, err := d.field(t, f.Name)
		if err != nil {
			return nil, err
		}
		if doc == "" {
			return nil, fmt.Errorf("config.Config.%s (%s): no doc comment", f.Name, name)
		}
		sec := Section{Name: name, Doc: prose(doc, f.Name, name, nil)}
		if err := d.walk(name+".", f.Type, v.Field(i), &sec.Keys); err != nil {
			return nil, err
		}
		m.Sections = append(m.Sections, sec)
	}
	envs, err := d.envOptions()
	if err != nil {
		return nil, err
	}
	m.Envs = envs
	return &m, nil
}

// walk adds the keys of struct type t (its value v, defaulted) under prefix.
func (d *docs) walk(prefix string, t reflect.Type, v reflect.Value, out *[]Key) error {
	siblings, err := d.siblings(t)
	if err != nil {
		return err
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, inline, skip := yamlName(f)
		if skip {
			continue
		}
		fv := v.Field(i)
		if inline && f.Type.Kind() == reflect.Struct {
			if err := d.walk(prefix, f.Type, fv, out); err != nil {
				return err
			}
			continue
		}
		doc, def, err := d.field(t, f.Name)
		if err != nil {
			return err
		}
		where := t.PkgPath() + "." + t.Name() + "." + f.Name
		if doc == "" {
			return fmt.Errorf("%s (%s%s): no doc comment", where, prefix, name)
		}
		if inline {
			// The inline map: the keys the section does not name are
			// someone else's (the environment's options).
			*out = append(*out, Key{Name: prefix + "OPTION", Type: "any", Default: "none",
				Doc: prose(doc, "", "", siblings)})
			continue
		}
		k := Key{Name: prefix + name, Type: typeName(f.Type), Doc: prose(doc, f.Name, name, siblings)}
		if def != "" {
			k.Default = def
		} else {
			k.Default = defaultOf(fv)
		}
		*out = append(*out, k)
		if f.Type.Kind() == reflect.Struct && !isDuration(f.Type) {
			if err := d.walk(prefix+name+".", f.Type, fv, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlName is a field's key: its yaml tag's name (yaml's default, the
// lowercased field name, without one), whether it is inline, and whether
// the field is not a key at all.
func yamlName(f reflect.StructField) (name string, inline, skip bool) {
	if !f.IsExported() {
		return "", false, true
	}
	tag, ok := f.Tag.Lookup("yaml")
	if tag == "-" {
		return "", false, true
	}
	parts := strings.Split(tag, ",")
	name = parts[0]
	for _, o := range parts[1:] {
		if o == "inline" {
			inline = true
		}
	}
	if !ok || (name == "" && !inline) {
		name = strings.ToLower(f.Name)
	}
	return name, inline, false
}

var durationType = reflect.TypeOf(pipeline.Duration(0))

func isDuration(t reflect.Type) bool { return t == durationType }

// typeName is a Go type in the reference's words.
func typeName(t reflect.Type) string {
	if isDuration(t) {
		return "duration"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "list of " + plural(typeName(t.Elem()))
	case reflect.Map:
		e := t.Elem()
		if e.Kind() == reflect.Interface {
			return "mapping"
		}
		if e.Kind() == reflect.Pointer && e.Elem().Kind() == reflect.Struct {
			return "mapping of sections"
		}
		return "mapping of " + plural(typeName(e))
	case reflect.Struct:
		return "mapping"
	case reflect.Interface:
		return "any"
	}
	return t.String()
}

func plural(s string) string {
	switch s {
	case "any":
		return "values"
	case "mapping":
		return "mappings"
	}
	if strings.HasPrefix(s, "list of ") {
		return "lists"
	}
	return s + "s"
}

// defaultOf renders a defaulted value: a value in backquotes, or none.
func defaultOf(v reflect.Value) string {
	if isDuration(v.Type()) {
		return "`" + shortDuration(time.Duration(v.Int())) + "`"
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return "none"
		}
		return defaultOf(v.Elem())
	case reflect.String:
		if v.String() == "" {
			return "none"
		}
		return "`" + v.String() + "`"
	case reflect.Bool:
		return "`" + strconv.FormatBool(v.Bool()) + "`"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "`" + strconv.FormatInt(v.Int(), 10) + "`"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "`" + strconv.FormatUint(v.Uint(), 10) + "`"
	case reflect.Float32, reflect.Float64:
		return "`" + strconv.FormatFloat(v.Float(), 'g', -1, 64) + "`"
	case reflect.Slice:
		if v.IsNil() {
			return "none"
		}
		items := make([]string, v.Len())
		for i := range items {
			items[i] = strings.Trim(defaultOf(v.Index(i)), "`")
			if v.Index(i).Kind() == reflect.String {
				items[i] = strconv.Quote(items[i])
			}
		}
		return "`[" + strings.Join(items, ", ") + "]`"
	case reflect.Map:
		if v.Len() == 0 {
			return "none"
		}
	case reflect.Struct:
		return "see below"
	}
	return "none"
}

// shortDuration is d as a config writes it: 10m rather than 10m0s.
func shortDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// docs reads doc comments from the module's sources, one package at a time.
type docs struct {
	root string
	pkgs map[string]*pkgDocs
}

// pkgDocs are one package's struct types (with their fields' doc
// comments) and string constants.
type pkgDocs struct {
	structs map[string]*ast.StructType
	consts  map[string]string // string constants: Name = "math"
	files   []*ast.File
}

func (d *docs) pkg(path string) (*pkgDocs, error) {
	if p, ok := d.pkgs[path]; ok {
		return p, nil
	}
	rel, ok := strings.CutPrefix(path, modulePath)
	if !ok {
		return nil, fmt.Errorf("%s: a config type outside the module", path)
	}
	dir := filepath.Join(d.root, filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	p := &pkgDocs{structs: map[string]*ast.StructType{}, consts: map[string]string{}}
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range g.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					st, ok := s.Type.(*ast.StructType)
					if !ok {
						continue
					}
					p.structs[s.Name.Name] = st
				case *ast.ValueSpec:
					if g.Tok != token.CONST {
						continue
					}
					for i, id := range s.Names {
						if i < len(s.Values) {
							if lit, ok := s.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								if v, err := strconv.Unquote(lit.Value); err == nil {
									p.consts[id.Name] = v
								}
							}
						}
					}
				}
			}
		}
	}
	d.pkgs[path] = p
	return p, nil
}

// field returns the doc comment of struct t's field (its "Default:"
// paragraph apart).
func (d *docs) field(t reflect.Type, field string) (doc, def string, err error) {
	p, err := d.pkg(t.PkgPath())
	if err != nil {
		return "", "", err
	}
	st, ok := p.structs[t.Name()]
	if !ok {
		return "", "", fmt.Errorf("%s.%s: struct type not found in the source", t.PkgPath(), t.Name())
	}
	for _, f := range st.Fields.List {
		for _, n := range f.Names {
			if n.Name == field {
				doc, def := splitDefault(commentText(f))
				return doc, def, nil
			}
		}
		if len(f.Names) == 0 && embeddedName(f.Type) == field {
			doc, def := splitDefault(commentText(f))
			return doc, def, nil
		}
	}
	return "", "", fmt.Errorf("%s.%s.%s: field not found in the source", t.PkgPath(), t.Name(), field)
}

// siblings maps struct t's Go field names to their keys, for the prose.
func (d *docs) siblings(t reflect.Type) (map[string]string, error) {
	out := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, inline, skip := yamlName(f)
		if skip || inline {
			continue
		}
		out[f.Name] = name
	}
	return out, nil
}

func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.StarExpr:
		return embeddedName(e.X)
	}
	return ""
}

func commentText(f *ast.Field) string {
	if f.Doc != nil {
		return f.Doc.Text()
	}
	return ""
}

// splitDefault takes a last paragraph "Default: TEXT" off a doc comment.
func splitDefault(doc string) (rest, def string) {
	doc = strings.TrimSpace(doc)
	paras := strings.Split(doc, "\n\n")
	last := paras[len(paras)-1]
	if d, ok := strings.CutPrefix(last, "Default: "); ok {
		def = strings.TrimSuffix(strings.Join(strings.Fields(d), " "), ".")
		return strings.Join(paras[:len(paras)-1], "\n\n"), def
	}
	return doc, ""
}

// prose turns a doc comment into the reference's words: one paragraph,
// the leading Go name and the sibling fields' Go names written as keys.
func prose(doc, goName, key string, siblings map[string]string) string {
	s := strings.Join(strings.Fields(doc), " ")
	s = docLinkRE.ReplaceAllStringFunc(s, func(m string) string {
		if name, ok := strings.CutPrefix(m, "docs/"); ok {
			return "[" + m + "](" + name + ")"
		}
		return "[" + m + "](../" + m + ")"
	})
	if rest, ok := strings.CutPrefix(s, goName+" "); ok && goName != "" {
		s = "`" + key + "` " + rest
	}
	return replaceIdents(s, siblings)
}

// docLinkRE matches a doc named in a comment: docs/NAME.md or SCHEMA.md.
var docLinkRE = regexp.MustCompile(`\bdocs/[a-z0-9-]+\.md\b|\bSCHEMA\.md\b`)

// identRE matches a capitalised word: a Go name when it is a sibling
// field's.
var identRE = regexp.MustCompile(`[A-Z][A-Za-z0-9]*`)

// replaceIdents writes the sibling fields' Go names in s as their keys,
// leaving dotted names (Shard.Resolve) and code spans alone.
func replaceIdents(s string, siblings map[string]string) string {
	var b strings.Builder
	last := 0
	inCode := false
	for _, m := range identRE.FindAllStringIndex(s, -1) {
		inCode = inCode != (strings.Count(s[last:m[0]], "`")%2 == 1)
		b.WriteString(s[last:m[0]])
		last = m[1]
		w := s[m[0]:m[1]]
		k, ok := siblings[w]
		before, after := byte(' '), byte(' ')
		if m[0] > 0 {
			before = s[m[0]-1]
		}
		if m[1] < len(s) {
			after = s[m[1]]
		}
		if !ok || inCode || strings.ToUpper(w) == w || before == '.' || isWord(before) || isWord(after) ||
			(after == '.' && m[1]+1 < len(s) && isWord(s[m[1]+1])) {
			b.WriteString(w)
			continue
		}
		b.WriteString("`" + k + "`")
	}
	b.WriteString(s[last:])
	return b.String()
}

func isWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// envOptions reads each built-in environment's options: a package under
// envs/ with a constant Name and a struct type Options (or Config) whose
// fields have yaml tags.
func (d *docs) envOptions() ([]EnvOptions, error) {
	entries, err := os.ReadDir(filepath.Join(d.root, "envs"))
	if err != nil {
		return nil, err
	}
	var out []EnvOptions
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" || e.Name() == "builtin" {
			continue
		}
		rel := "envs/" + e.Name()
		p, err := d.pkg(modulePath + "/" + rel)
		if err != nil {
			return nil, err
		}
		name, ok := p.consts["Name"]
		if !ok {
			continue
		}
		typ := "Options"
		st, ok := p.structs[typ]
		if !ok {
			typ = "Config"
			if st, ok = p.structs[typ]; !ok {
				return nil, fmt.Errorf("%s: environment %q has no Options or Config struct", rel, name)
			}
		}
		eo := EnvOptions{Name: name, Package: rel, Type: typ}
		eo.Operational, eo.Secret = specLists(p.files)
		siblings := map[string]string{}
		for _, f := range st.Fields.List {
			key := tagKey(f)
			for _, n := range f.Names {
				if key != "" && key != "-" {
					siblings[n.Name] = key
				}
			}
		}
		for _, f := range st.Fields.List {
			key := tagKey(f)
			if key == "" || key == "-" {
				continue
			}
			for _, n := range f.Names {
				doc, def := splitDefault(commentText(f))
				if doc == "" {
					return nil, fmt.Errorf("%s.%s.%s (env.%s): no doc comment", rel, typ, n.Name, key)
				}
				if def == "" {
					def = "none"
				}
				eo.Keys = append(eo.Keys, Key{Name: "env." + key, Type: astType(f.Type), Default: def,
					Doc: prose(doc, n.Name, key, siblings)})
			}
		}
		out = append(out, eo)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// tagKey is a source field's yaml key ("" without a tag).
func tagKey(f *ast.Field) string {
	if f.Tag == nil {
		return ""
	}
	tag, err := strconv.Unquote(f.Tag.Value)
	if err != nil {
		return ""
	}
	v, ok := reflect.StructTag(tag).Lookup("yaml")
	if !ok {
		return ""
	}
	return strings.Split(v, ",")[0]
}

// astType is a source type in the reference's words.
func astType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		switch e.Name {
		case "string", "bool":
			return e.Name
		case "int", "int64", "int32", "uint", "uint64":
			return "integer"
		case "float64", "float32":
			return "number"
		case "any":
			return "any"
		}
	case *ast.SelectorExpr:
		if e.Sel.Name == "Duration" {
			return "duration"
		}
	case *ast.StarExpr:
		return astType(e.X)
	case *ast.ArrayType:
		return "list of " + plural(astType(e.Elt))
	case *ast.MapType:
		v := astType(e.Value)
		if v == "any" {
			return "mapping"
		}
		return "mapping of " + plural(v)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%T", e)
	return b.String()
}

// specLists reads the Operational and Secret key lists of an
// environment's envs.Spec literal.
func specLists(files []*ast.File) (operational, secret []string) {
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			id, ok := kv.Key.(*ast.Ident)
			if !ok || (id.Name != "Operational" && id.Name != "Secret") {
				return true
			}
			lit, ok := kv.Value.(*ast.CompositeLit)
			if !ok {
				return true
			}
			var keys []string
			for _, el := range lit.Elts {
				if bl, ok := el.(*ast.BasicLit); ok && bl.Kind == token.STRING {
					if s, err := strconv.Unquote(bl.Value); err == nil {
						keys = append(keys, s)
					}
				}
			}
			if id.Name == "Operational" {
				operational = keys
			} else {
				secret = keys
			}
			return false
		})
	}
	return operational, secret
}

// capitalize upper-cases a sentence's first letter.
func capitalize(s string) string {
	for i, r := range s {
		return string(unicode.ToUpper(r)) + s[i+len(string(r)):]
	}
	return s
}
