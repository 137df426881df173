package parquet

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/apache/arrow/go/v17/arrow/memory"
	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/stages/collate"
)

// parquetType spells a parquet-go node's type as schema.Column.ParquetType
// does.
func parquetType(t *testing.T, path string, n pq.Node) string {
	if n.Leaf() {
		typ := n.Type()
		s := typ.Kind().String()
		if lt := typ.LogicalType(); lt != nil {
			switch v := lt.Value.(type) {
			case *format.StringType:
				s += " (STRING)"
			case *format.IntType:
				if v.BitWidth != 32 && v.BitWidth != 64 {
					sign := "signed"
					if !v.IsSigned {
						sign = "unsigned"
					}
					s += fmt.Sprintf(" (INT(%d, %s))", v.BitWidth, sign)
				}
			case nil:
			default:
				t.Errorf("%s has logical type %s, which schema.Column.ParquetType does not spell", path, lt)
			}
		}
		return s
	}
	if lt := n.Type().LogicalType(); lt != nil && isList(lt.Value) {
		// The three-level LIST layout: a repeated group "list" of one
		// required "element".
		fs := n.Fields()
		if len(fs) != 1 || fs[0].Name() != "list" || !fs[0].Repeated() || len(fs[0].Fields()) != 1 ||
			fs[0].Fields()[0].Name() != "element" || !fs[0].Fields()[0].Required() {
			t.Errorf("%s is not a three-level LIST of required elements", path)
			return "?"
		}
		return "LIST of " + parquetType(t, path+".element", fs[0].Fields()[0])
	}
	s := "group("
	for i, f := range n.Fields() {
		if !f.Required() {
			t.Errorf("struct field %s.%s is not required", path, f.Name())
		}
		if i > 0 {
			s += ", "
		}
		s += f.Name() + " " + parquetType(t, path+"."+f.Name(), f)
	}
	return s + ")"
}

// The Parquet row types are the column tables: every column, in order,
// with its name, its Parquet type and its nullability. A column added to
// the table (or the struct) and not to the other fails here.
func TestRowsMatchTheTables(t *testing.T) {
	for _, tt := range []struct {
		name  string
		model any
		cols  []schema.Column
	}{
		{"row", row{}, schema.Columns()},
		{"stepRow", stepRow{}, schema.StepColumns()},
	} {
		fs := pq.SchemaOf(tt.model).Fields()
		if len(fs) != len(tt.cols) {
			t.Errorf("%s has %d columns, the table %d", tt.name, len(fs), len(tt.cols))
		}
		for i := range min(len(fs), len(tt.cols)) {
			f, c := fs[i], tt.cols[i]
			if f.Name() != c.Name {
				t.Errorf("%s column %d is %s, the table's %s", tt.name, i, f.Name(), c.Name)
				continue
			}
			if got, want := parquetType(t, c.Name, f), c.ParquetType(); got != want {
				t.Errorf("%s column %s is %s, the table's %s", tt.name, c.Name, got, want)
			}
			if f.Optional() != c.Nullable || f.Repeated() {
				t.Errorf("%s column %s: optional %v, the table's nullable %v", tt.name, c.Name, f.Optional(), c.Nullable)
			}
		}
	}
}

// zeroFields returns the paths of the fields of the values of v (a slice
// of structs) that are zero in every value: fields convert never fills.
func zeroFields(path string, v reflect.Value) []string {
	et := v.Type().Elem()
	var out []string
	for i := range et.NumField() {
		name := path + "." + et.Field(i).Name
		set := false
		var inner reflect.Value
		for j := range v.Len() {
			f := v.Index(j).Field(i)
			if !f.IsZero() && !(f.Kind() == reflect.Slice && f.Len() == 0) {
				set = true
				if f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct {
					if !inner.IsValid() {
						inner = reflect.MakeSlice(f.Type(), 0, 0)
					}
					inner = reflect.AppendSlice(inner, f)
				}
			}
		}
		if !set {
			out = append(out, name)
		}
		if inner.IsValid() {
			out = append(out, zeroFields(name, inner)...)
		}
	}
	return out
}

// convert fills every field of the row, nested ones included, from a
// record that sets every column.
func TestConvertFillsEveryField(t *testing.T) {
	c := collate.New(memory.DefaultAllocator, 1)
	defer c.Release()
	g := pipelinetest.Group(3, 8, 64)
	g.Rollouts[1].Retries = 2
	g.Rollouts[2].Truncated = true
	g.Rollouts[3].MaxTurnsReached = true
	g.Rollouts[4].Error = "boom"
	g.Rollouts[5].FilterReason = "unfiltered:zero_std"
	rec := c.Add(g)
	defer rec.Release()
	var conv converter
	rows := conv.convert(rec)
	for _, p := range zeroFields("row", reflect.ValueOf(rows)) {
		t.Errorf("convert never fills %s", p)
	}
}

func isList(v format.LogicalTypeValue) bool {
	_, ok := v.(*format.ListType)
	return ok
}
