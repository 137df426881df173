package sources

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/trajflow/trajflow/pipeline"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"
)

// pnode is one node of a Parquet schema with what record assembly needs:
// its levels and the range of leaf columns under it.
type pnode struct {
	name     string
	node     parquet.Node
	optional bool
	repeated bool
	def, rep int // definition and repetition levels at which the node is present
	first    int // first leaf column under the node
	ncols    int // leaf columns under the node
	children []*pnode
	shape    shape
}

type shape int

const (
	shapePlain shape = iota
	shapeList        // LIST-annotated group: unwrap to a list
	shapeMap         // MAP-annotated group: unwrap to an object
)

// buildSchemaTree builds the tree of a file's schema. The root is a plain
// group whatever repetition the file gives it.
func buildSchemaTree(schema *parquet.Schema) (root *pnode, ncols int) {
	root = &pnode{node: schema}
	for _, f := range schema.Fields() {
		root.children = append(root.children, buildTree(f, f.Name(), 0, 0, &ncols))
	}
	root.ncols = ncols
	return root, ncols
}

// buildTree walks a schema depth first, numbering leaf columns in order.
func buildTree(node parquet.Node, name string, def, rep int, col *int) *pnode {
	n := &pnode{name: name, node: node, optional: node.Optional(), repeated: node.Repeated(), first: *col}
	if n.optional || n.repeated {
		def++
	}
	if n.repeated {
		rep++
	}
	n.def, n.rep = def, rep
	if node.Leaf() {
		*col++
		n.ncols = 1
		return n
	}
	for _, f := range node.Fields() {
		n.children = append(n.children, buildTree(f, f.Name(), def, rep, col))
	}
	n.ncols = *col - n.first
	switch {
	case isListNode(node) && len(n.children) == 1 && n.children[0].repeated:
		n.shape = shapeList
	case isMapNode(node) && len(n.children) == 1 && n.children[0].repeated && len(n.children[0].children) == 2:
		n.shape = shapeMap
	}
	return n
}

func isListNode(node parquet.Node) bool {
	if lt := node.Type().LogicalType(); lt != nil {
		if _, ok := lt.Value.(*format.ListType); ok {
			return true
		}
	}
	ct := node.Type().ConvertedType()
	return ct != nil && *ct == deprecated.List
}

func isMapNode(node parquet.Node) bool {
	if lt := node.Type().LogicalType(); lt != nil {
		if _, ok := lt.Value.(*format.MapType); ok {
			return true
		}
	}
	ct := node.Type().ConvertedType()
	return ct != nil && (*ct == deprecated.Map || *ct == deprecated.MapKeyValue)
}

// assembleRow turns one row into an object, top-level columns in schema
// order. cols holds each leaf column's values for the row.
func assembleRow(root *pnode, cols [][]parquet.Value) (orderedObject, error) {
	obj := make(orderedObject, 0, len(root.children))
	for _, c := range root.children {
		v, err := assemble(c, cols[c.first:c.first+c.ncols])
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.name, err)
		}
		obj = append(obj, kv{c.name, v})
	}
	return obj, nil
}

// assemble builds the value of one instance of n from the values of its
// leaf columns for that instance.
func assemble(n *pnode, cols [][]parquet.Value) (any, error) {
	if err := checkCols(cols); err != nil {
		return nil, err
	}
	if n.repeated {
		if cols[0][0].DefinitionLevel() < n.def {
			return []any{}, nil
		}
		elems := splitElements(cols, n.rep)
		out := make([]any, len(elems))
		for i, e := range elems {
			v, err := assembleOne(n, e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	if n.optional && cols[0][0].DefinitionLevel() < n.def {
		return nil, nil
	}
	return assembleOne(n, cols)
}

// checkCols guards against corrupt rows: every column must have a value.
func checkCols(cols [][]parquet.Value) error {
	if len(cols) == 0 {
		return fmt.Errorf("no columns")
	}
	for _, c := range cols {
		if len(c) == 0 {
			return fmt.Errorf("missing values")
		}
	}
	return nil
}

// splitElements cuts each column's values where a new element of a
// repeated node at repetition level rep starts.
func splitElements(cols [][]parquet.Value, rep int) [][][]parquet.Value {
	var elems [][][]parquet.Value
	for ci, c := range cols {
		k := 0
		start := 0
		for i := 1; i <= len(c); i++ {
			if i == len(c) || c[i].RepetitionLevel() <= rep {
				if k == len(elems) {
					elems = append(elems, make([][]parquet.Value, len(cols)))
				}
				elems[k][ci] = c[start:i]
				k++
				start = i
			}
		}
	}
	return elems
}

// assembleOne builds one present (non-null) instance of n.
func assembleOne(n *pnode, cols [][]parquet.Value) (any, error) {
	if err := checkCols(cols); err != nil {
		return nil, err
	}
	if n.children == nil {
		return leafValue(n.node, cols[0][0]), nil
	}
	switch n.shape {
	case shapeList:
		rg := n.children[0]
		list, err := assemble(rg, cols)
		if err != nil {
			return nil, err
		}
		items, _ := list.([]any)
		if len(rg.children) == 1 { // 3-level list: unwrap the element
			for i, it := range items {
				if o, ok := it.(orderedObject); ok && len(o) == 1 {
					items[i] = o[0].v
				}
			}
		}
		return items, nil
	case shapeMap:
		kvs, err := assemble(n.children[0], cols)
		if err != nil {
			return nil, err
		}
		items, _ := kvs.([]any)
		obj := make(orderedObject, 0, len(items))
		for _, it := range items {
			o, ok := it.(orderedObject)
			if !ok || len(o) != 2 {
				continue
			}
			obj = append(obj, kv{keyString(o[0].v), o[1].v})
		}
		return obj, nil
	}
	obj := make(orderedObject, 0, len(n.children))
	for _, c := range n.children {
		off := c.first - n.first
		v, err := assemble(c, cols[off:off+c.ncols])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		obj = append(obj, kv{c.name, v})
	}
	return obj, nil
}

// leafValue converts one leaf value to a JSON value. Strings (and byte
// arrays holding UTF-8) become strings, JSON columns their JSON, other byte
// arrays base64, non-finite floats null.
func leafValue(node parquet.Node, v parquet.Value) any {
	if v.IsNull() {
		return nil
	}
	switch v.Kind() {
	case parquet.Boolean:
		return v.Boolean()
	case parquet.Int32:
		return json.Number(strconv.FormatInt(int64(v.Int32()), 10))
	case parquet.Int64:
		return json.Number(strconv.FormatInt(v.Int64(), 10))
	case parquet.Float:
		f := v.Float()
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return nil
		}
		return json.Number(strconv.FormatFloat(float64(f), 'g', -1, 32))
	case parquet.Double:
		f := v.Double()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	case parquet.ByteArray:
		b := v.ByteArray()
		if lt := node.Type().LogicalType(); lt != nil {
			if _, ok := lt.Value.(*format.JsonType); ok && json.Valid(b) {
				return json.RawMessage(append([]byte(nil), b...))
			}
		}
		if utf8.Valid(b) {
			return string(b)
		}
		return base64.StdEncoding.EncodeToString(b)
	default: // INT96, FIXED_LEN_BYTE_ARRAY
		return base64.StdEncoding.EncodeToString(v.Bytes())
	}
}

func keyString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case nil:
		return "null"
	default:
		b, _ := pipeline.MarshalJSON(x)
		return string(b)
	}
}

// kv is one member of an orderedObject.
type kv struct {
	k string
	v any
}

// orderedObject is a JSON object that keeps its members' order.
type orderedObject []kv

// MarshalJSON writes the members in order.
func (o orderedObject) MarshalJSON() ([]byte, error) {
	buf := []byte{'{'}
	for i, m := range o {
		if i > 0 {
			buf = append(buf, ',')
		}
		k, err := pipeline.MarshalJSON(m.k)
		if err != nil {
			return nil, err
		}
		buf = append(buf, k...)
		buf = append(buf, ':')
		v, err := pipeline.MarshalJSON(m.v)
		if err != nil {
			return nil, err
		}
		buf = append(buf, v...)
	}
	return append(buf, '}'), nil
}
