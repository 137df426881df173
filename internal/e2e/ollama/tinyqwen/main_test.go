package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBF16(t *testing.T) {
	for _, tt := range []struct {
		v    float32
		want uint16
	}{
		{0, 0x0000}, {1, 0x3f80}, {-2, 0xc000}, {8, 0x4100},
		{1 + 1.0/256, 0x3f80}, // halfway: to even (down)
		{1 + 3.0/256, 0x3f82}, // halfway: to even (up)
		{1 + 1.0/128, 0x3f81}, // exact
		{1 + 1.5/256, 0x3f81}, // above halfway: up
	} {
		if got := bf16(tt.v); got != tt.want {
			t.Errorf("bf16(%v) = %#04x, want %#04x", tt.v, got, tt.want)
		}
	}
}

// TestSafetensors reads back what writeSafetensors wrote: the header's
// length, its JSON (dtype, shape, offsets), 8-byte alignment, the data.
func TestSafetensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	ts := []tensor{
		{name: "b", shape: []int{3}, data: []float32{1, -2, 8}},
		{name: "a", shape: []int{2, 2}, data: []float32{0, 1, 0, 1}},
	}
	if err := writeSafetensors(path, ts); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 || int(8+n) > len(b) {
		t.Fatalf("header length %d of a %d-byte file", n, len(b))
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	if len(data) != 2*7 {
		t.Fatalf("%d data bytes, want 14", len(data))
	}
	want := map[string][]uint16{"a": {0, 0x3f80, 0, 0x3f80}, "b": {0x3f80, 0xc000, 0x4100}}
	for name, vals := range want {
		var h struct {
			Dtype   string `json:"dtype"`
			Shape   []int  `json:"shape"`
			Offsets []int  `json:"data_offsets"`
		}
		if err := json.Unmarshal(header[name], &h); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if h.Dtype != "BF16" || h.Offsets[1]-h.Offsets[0] != 2*len(vals) {
			t.Fatalf("%s: %+v", name, h)
		}
		for i, v := range vals {
			if got := binary.LittleEndian.Uint16(data[h.Offsets[0]+2*i:]); got != v {
				t.Errorf("%s[%d] = %#04x, want %#04x", name, i, got, v)
			}
		}
	}
	if _, ok := header["__metadata__"]; !ok {
		t.Error("no __metadata__")
	}
}

// TestToolChain: the chain after "\n" spells the tool call in distinct
// tokens, and a text whose tokens repeat is refused.
func TestToolChain(t *testing.T) {
	pieces := []string{`{"`, `name`, `":"`, `calculator`, `","`, `arguments`, `":{"`, `expression`, `":`, `Ġ"`, `2`, `+`, `3`, `"}}`}
	ids := map[string]int{"Ċ": 198, "Ġ": 220, "<tool_call>": 151657, "</tool_call>": 151658, "<|im_end|>": 151645}
	for i, p := range pieces {
		ids[p] = 1000 + i
	}
	for i, c := range ToolCallText { // single characters too: greedy takes the longest
		if _, ok := ids[string(c)]; !ok {
			ids[string(c)] = 2000 + i
		}
	}
	chain, err := toolChain(ids)
	if err != nil {
		t.Fatal(err)
	}
	text := map[int]string{}
	for s, id := range ids {
		text[id] = s
	}
	var got strings.Builder
	for _, id := range chain {
		got.WriteString(text[id])
	}
	if want := "Ċ<tool_call>" + strings.ReplaceAll(ToolCallText, " ", "Ġ") + "</tool_call><|im_end|>"; got.String() != want {
		t.Errorf("chain spells %q, want %q", got.String(), want)
	}
	delete(ids, `":`) // then `"` would come twice
	delete(ids, `Ġ"`)
	if _, err := toolChain(ids); err == nil || !strings.Contains(err.Error(), "repeats") {
		t.Errorf("a chain with a repeated token: %v", err)
	}
}
