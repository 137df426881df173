package openai

// The wire formats of routed experts (router replay), transcribed from
// the engines' source:
//
// vLLM (vllm-project/vllm at d5dba2d7b0ab9b98096560c69db7126b54b14d79,
// vllm/entrypoints/openai/completion/protocol.py, CompletionResponseChoice):
// choices[].routed_experts is a base64-encoded .npy file (numpy.save) of
// shape (num_tokens - 1, num_layers, num_experts_per_tok), dtype uint8
// (256 experts or fewer) or uint16, over the prompt's tokens and the
// generated ones but the last (which was never run through the model);
// null when the server runs without --enable-return-routed-experts or the
// request was aborted before its first forward pass.
//
// SGLang (sgl-project/sglang at d4d0fc58371761f9f0da007a4ef4f0ad2bd19658,
// python/sglang/srt/layers/moe/routed_experts_capturer.py:
// get_routed_experts, extract_routed_experts_from_meta_info; the
// tokenizer manager's meta_info["routed_experts"]): meta_info.routed_experts
// is the base64 of the raw little-endian int32 bytes of a
// (seqlen - 1, num_hidden_layers, num_experts_per_tok) array, seqlen the
// prompt's and the output's tokens, with no shape: the layer count comes
// from the config (generate.routed_experts_layers). It is sent when the
// server runs with --enable-return-routed-experts and the request sets
// return_routed_experts: true.

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/pipeline"
)

// maxExpertID is the largest expert id the routes hold (int16).
const maxExpertID = math.MaxInt16

// npyMagic starts every .npy file.
const npyMagic = "\x93NUMPY"

// decodeNPYRoutes decodes vLLM's routed_experts, the base64 of a .npy
// file of shape (positions, layers, top_k). field names the JSON field in
// errors.
func decodeNPYRoutes(field, s string) (*pipeline.Routes, error) {
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: not base64: %w", field, err)
	}
	if len(data) < 10 || string(data[:6]) != npyMagic {
		return nil, fmt.Errorf("%s: not a .npy array (no \\x93NUMPY header)", field)
	}
	var hlen, off int
	switch data[6] {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(data[8:10])), 10
	case 2, 3:
		if len(data) < 12 {
			return nil, fmt.Errorf("%s: .npy header cut short", field)
		}
		hlen, off = int(binary.LittleEndian.Uint32(data[8:12])), 12
	default:
		return nil, fmt.Errorf("%s: .npy format version %d.%d is unknown", field, data[6], data[7])
	}
	if hlen > len(data)-off {
		return nil, fmt.Errorf("%s: .npy header of %d bytes, %d follow", field, hlen, len(data)-off)
	}
	descr, fortran, shape, err := npyHeader(string(data[off : off+hlen]))
	if err != nil {
		return nil, fmt.Errorf("%s: .npy header: %w", field, err)
	}
	if fortran {
		return nil, fmt.Errorf("%s: fortran_order arrays are not read (engines write C order)", field)
	}
	if len(shape) != 3 {
		return nil, fmt.Errorf("%s: shape %v: want (positions, layers, top_k)", field, shape)
	}
	size, read, err := npyType(descr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	n, layers, k := shape[0], shape[1], shape[2]
	if layers < 1 || k < 1 {
		return nil, fmt.Errorf("%s: shape %v: layers and top_k must be >= 1", field, shape)
	}
	body := data[off+hlen:]
	// The count, checked against the body before each product, so that
	// no shape overflows it.
	count, fits := n, n <= len(body)/size
	for _, d := range []int{layers, k} {
		fits = fits && count <= len(body)/size/d
		if fits {
			count *= d
		}
	}
	if !fits || count*size != len(body) {
		return nil, fmt.Errorf("%s: shape %v of %s does not fit the %d bytes after the header", field, shape, descr, len(body))
	}
	r := &pipeline.Routes{Layers: layers, TopK: k, Experts: make([]int16, count)}
	if descr == "|u1" || descr == "<u1" {
		// vLLM's type for 256 experts or fewer: every byte is an id in
		// range.
		for i, b := range body {
			r.Experts[i] = int16(b)
		}
		return r, nil
	}
	for i := range count {
		v := read(body[i*size:])
		if v < 0 || v > maxExpertID {
			w := layers * k
			return nil, fmt.Errorf("%s[%d][%d][%d]: expert id %d is out of range (0 to %d)", field, i/w, i%w/k, i%k, v, maxExpertID)
		}
		r.Experts[i] = int16(v)
	}
	return r, nil
}

// npyType returns the item size and reader of a .npy descr: the integer
// types an engine may write, little-endian (or of one byte).
func npyType(descr string) (int, func([]byte) int64, error) {
	switch descr {
	case "|u1", "<u1":
		return 1, func(b []byte) int64 { return int64(b[0]) }, nil
	case "|i1", "<i1":
		return 1, func(b []byte) int64 { return int64(int8(b[0])) }, nil
	case "<u2":
		return 2, func(b []byte) int64 { return int64(binary.LittleEndian.Uint16(b)) }, nil
	case "<i2":
		return 2, func(b []byte) int64 { return int64(int16(binary.LittleEndian.Uint16(b))) }, nil
	case "<u4":
		return 4, func(b []byte) int64 { return int64(binary.LittleEndian.Uint32(b)) }, nil
	case "<i4":
		return 4, func(b []byte) int64 { return int64(int32(binary.LittleEndian.Uint32(b))) }, nil
	case "<i8":
		return 8, func(b []byte) int64 { return int64(binary.LittleEndian.Uint64(b)) }, nil
	}
	return 0, nil, fmt.Errorf("dtype %q is not a little-endian integer type", descr)
}

// npyHeader reads a .npy header, a Python dict literal such as
// {'descr': '|u1', 'fortran_order': False, 'shape': (3, 2, 4), }.
func npyHeader(h string) (descr string, fortran bool, shape []int, err error) {
	h = strings.TrimSpace(h)
	if !strings.HasPrefix(h, "{") || !strings.HasSuffix(h, "}") {
		return "", false, nil, errors.New("not a dict")
	}
	value := func(key string) (string, error) {
		i := strings.Index(h, "'"+key+"':")
		if i < 0 {
			return "", fmt.Errorf("no %q", key)
		}
		return strings.TrimSpace(h[i+len(key)+3:]), nil
	}
	v, err := value("descr")
	if err != nil {
		return "", false, nil, err
	}
	if len(v) < 2 || v[0] != '\'' {
		return "", false, nil, errors.New("descr: want a quoted string")
	}
	end := strings.IndexByte(v[1:], '\'')
	if end < 0 {
		return "", false, nil, errors.New("descr: unterminated string")
	}
	descr = v[1 : 1+end]
	if v, err = value("fortran_order"); err != nil {
		return "", false, nil, err
	}
	switch {
	case strings.HasPrefix(v, "False"):
	case strings.HasPrefix(v, "True"):
		fortran = true
	default:
		return "", false, nil, errors.New("fortran_order: want True or False")
	}
	if v, err = value("shape"); err != nil {
		return "", false, nil, err
	}
	if len(v) == 0 || v[0] != '(' {
		return "", false, nil, errors.New("shape: want a tuple")
	}
	end = strings.IndexByte(v, ')')
	if end < 0 {
		return "", false, nil, errors.New("shape: unterminated tuple")
	}
	for _, d := range strings.Split(v[1:end], ",") {
		d = strings.TrimSpace(d)
		if d == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(d, "L"))
		if err != nil || n < 0 || n > 1<<31 {
			return "", false, nil, fmt.Errorf("shape: %q is not a dimension", d)
		}
		shape = append(shape, n)
	}
	return descr, fortran, shape, nil
}

// decodeSGLangRoutes decodes SGLang's meta_info.routed_experts, the base64
// of little-endian int32 ids over positions positions, layers layers each
// (0: unknown, recorded as 1 layer of every id of a position). An empty
// buffer over no positions gives nil.
func decodeSGLangRoutes(s string, positions, layers int) (*pipeline.Routes, error) {
	const field = "meta_info.routed_experts"
	data, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: not base64: %w", field, err)
	}
	if len(data)%4 != 0 {
		return nil, fmt.Errorf("%s: %d bytes are not whole int32 ids", field, len(data))
	}
	count := len(data) / 4
	if positions <= 0 {
		if count != 0 {
			return nil, fmt.Errorf("%s: %d ids for no position", field, count)
		}
		return nil, nil
	}
	if count == 0 || count%positions != 0 {
		return nil, fmt.Errorf("%s: %d ids are not a whole number per position over %d positions (prompt and output tokens but the last)", field, count, positions)
	}
	w := count / positions
	r := &pipeline.Routes{Layers: 1, TopK: w}
	if layers > 0 {
		if w%layers != 0 {
			return nil, fmt.Errorf("%s: %d ids per position are not a whole number per layer of generate.routed_experts_layers %d", field, w, layers)
		}
		r.Layers, r.TopK = layers, w/layers
	}
	r.Experts = make([]int16, count)
	for i := range count {
		v := int32(binary.LittleEndian.Uint32(data[i*4:]))
		if v < 0 || v > maxExpertID {
			return nil, fmt.Errorf("%s[%d]: expert id %d (position %d) is out of range (0 to %d)", field, i, v, i/w, maxExpertID)
		}
		r.Experts[i] = int16(v)
	}
	return r, nil
}

// checkRoutes checks an answer's routes against its request: at most the
// prompt's and answer's positions but the last, and the layers
// generate.routed_experts_layers gives.
func checkRoutes(field string, r *pipeline.Routes, prompt, generated, layers int) error {
	if r == nil {
		return nil
	}
	if n, most := r.Positions(), max(prompt+generated-1, 0); n > most {
		return fmt.Errorf("%s: %d positions, the prompt (%d tokens) and the answer (%d) have %d routed", field, n, prompt, generated, most)
	}
	if layers > 0 && r.Layers != layers {
		return fmt.Errorf("%s: %d layers, generate.routed_experts_layers is %d", field, r.Layers, layers)
	}
	return nil
}
