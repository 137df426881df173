// Package structured checks replies against the structured output a
// request asks for: an inference.Client decorator that validates each
// reply of a request whose params.response_format is
// {"type": "json_schema", "json_schema": {"schema": ...}} against that
// JSON Schema (or, for {"type": "json_object"}, that it is a JSON object),
// sends the request again when the reply does not match (up to
// Config.InvalidRetries times), and fails it with class invalid_output,
// naming the schema path that failed, when no try matched. With
// Config.RetryOn [length] a reply cut at max_tokens is tried again the
// same way. The tokens of the replies thrown away are reported
// (inference.Response.Discarded, inference.Error.Discarded).
package structured

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

// ClassInvalidOutput is the error class of a request whose every reply
// failed the structured-output check.
const ClassInvalidOutput = "invalid_output"

// Config is the structured-output keys of the generate section.
type Config struct {
	// InvalidRetries is how many times a request is sent again when its
	// reply does not match the JSON schema of its params.response_format
	// ({"type": "json_schema", "json_schema": {"schema": ...}}; with
	// {"type": "json_object"}: when it is not a JSON object), or is cut
	// (see retry_on). The tokens of every try count (the row's
	// discarded_prompt_tokens and discarded_completion_tokens metrics, and
	// the cost). When no try matches, the row is an error of class
	// invalid_output naming the schema path that failed (docs/offline.md).
	//
	// Default: 2.
	InvalidRetries *int `yaml:"invalid_retries"`
	// RetryOn lists the finish reasons that also send a request again, as
	// an invalid reply does: length (a reply cut at max_tokens). Off by
	// default: in RL a cut reply is an outcome.
	RetryOn []string `yaml:"retry_on"`
	// InvalidRetrySeed gives each try after the first (see
	// invalid_retries) a seed of its own, derived from the request's seed
	// (or its sample) and the try, so that a provider that answers a body
	// the same way every time (a fixed seed, temperature 0, the Batch
	// API's custom_id) answers anew; a rerun derives the same seeds. With
	// false a retry sends the body it sent before, which generate.api:
	// batch refuses (the same body, the same custom_id: the same answer,
	// paid again).
	//
	// Default: true.
	InvalidRetrySeed *bool `yaml:"invalid_retry_seed"`
	// InvalidRetryParams are body parameters set on the tries after the
	// first, over the request's own: {temperature: 1.0}, say, for a run at
	// temperature 0.
	InvalidRetryParams map[string]any `yaml:"invalid_retry_params"`
}

// RetrySeed is invalid_retry_seed (its default when unset).
func (c *Config) RetrySeed() bool { return c.InvalidRetrySeed == nil || *c.InvalidRetrySeed }

// RetriesVary reports whether a try after the first sends a body of its
// own (a seed, or invalid_retry_params).
func (c *Config) RetriesVary() bool { return c.RetrySeed() || len(c.InvalidRetryParams) > 0 }

// DefaultInvalidRetries is invalid_retries' default.
const DefaultInvalidRetries = 2

// SetDefaults fills the keys left unset.
func (c *Config) SetDefaults() {
	if c.InvalidRetries == nil {
		n := DefaultInvalidRetries
		c.InvalidRetries = &n
	}
	if c.InvalidRetrySeed == nil {
		t := true
		c.InvalidRetrySeed = &t
	}
}

// Retries is invalid_retries (its default when unset).
func (c *Config) Retries() int {
	if c.InvalidRetries == nil {
		return DefaultInvalidRetries
	}
	return *c.InvalidRetries
}

// Validate reports every problem of the keys at once.
func (c *Config) Validate() error {
	var p pipeline.Problems
	if c.InvalidRetries != nil && *c.InvalidRetries < 0 {
		p.Add("invalid_retries", "must be >= 0, got %d", *c.InvalidRetries)
	}
	for i, r := range c.RetryOn {
		if r != "length" {
			p.Add(fmt.Sprintf("retry_on[%d]", i), "%q: want length (the only finish reason retried)", r)
		}
	}
	return p.Err()
}

// CheckParams compiles the JSON schema of params.response_format, when
// there is one, so that a config whose schema does not compile fails
// before anything is sent; the error names the key under params.
func CheckParams(params map[string]any) error {
	c := &checker{schemas: map[string]*compiled{}}
	_, err := c.wanted(&inference.Request{Params: params})
	return err
}

// Wrap returns a client that checks the replies of client as cfg says.
// The result implements inference.Tokenizer, inference.Detokenizer and
// inference.ContextLimiter where client does (inference.Decorate).
func Wrap(client inference.Client, cfg Config) inference.Client {
	c := &checker{next: client, retries: cfg.Retries(), onLength: slices.Contains(cfg.RetryOn, "length"), schemas: map[string]*compiled{},
		seed: cfg.RetrySeed(), params: cfg.InvalidRetryParams}
	return inference.Decorate(c, client)
}

type checker struct {
	next     inference.Client
	retries  int
	onLength bool
	seed     bool           // a seed of its own for each retry
	params   map[string]any // set on each retry

	mu      sync.Mutex
	schemas map[string]*compiled // by the schema's JSON
}

// compiled is a compiled schema, or why it does not compile.
type compiled struct {
	schema *jsonschema.Schema
	err    error
}

// maxSchemas bounds the compiled schemas kept (rows may carry their own).
const maxSchemas = 1024

// Complete sends req, and again while the reply fails the check.
func (c *checker) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	want, err := c.wanted(req)
	if err != nil {
		return nil, &inference.Error{Class: ClassInvalidOutput, Msg: err.Error()}
	}
	if want == nil && !c.onLength {
		return c.next.Complete(ctx, req)
	}
	var spent inference.Usage
	var why string
	for try := 0; try <= c.retries; try++ {
		resp, err := c.next.Complete(ctx, c.retry(req, try))
		if err != nil {
			var e *inference.Error
			if spent != (inference.Usage{}) && errors.As(err, &e) {
				e.Discarded = e.Discarded.Add(spent)
			}
			return nil, err
		}
		// An answer a pause aborted (inference.FinishAbort) is a partial
		// output its caller continues, not a reply to check.
		if resp.FinishReason == inference.FinishAbort {
			resp.Discarded = resp.Discarded.Add(spent)
			return resp, nil
		}
		why = c.check(want, resp)
		if why == "" {
			resp.Discarded = resp.Discarded.Add(spent)
			return resp, nil
		}
		spent = spent.Add(inference.Usage{PromptTokens: resp.PromptTokens, CompletionTokens: resp.CompletionTokens, Tries: 1})
		spent = spent.Add(resp.Discarded)
	}
	return nil, &inference.Error{Class: ClassInvalidOutput, Discarded: spent,
		Msg: fmt.Sprintf("%s (after %d tries; generate.invalid_retries is %d)", why, c.retries+1, c.retries)}
}

// retry is the request of try (0: req itself): a seed of its own (from
// the request's seed, else its sample, and the try) and the
// invalid_retry_params, over a copy of its params.
func (c *checker) retry(req *inference.Request, try int) *inference.Request {
	if try == 0 || !c.seed && len(c.params) == 0 {
		return req
	}
	r := *req
	r.Params = make(map[string]any, len(req.Params)+len(c.params)+1)
	for k, v := range req.Params {
		r.Params[k] = v
	}
	for k, v := range c.params {
		r.Params[k] = v
	}
	if c.seed {
		r.Params["seed"] = RetrySeed(req.Params["seed"], req.Sample, try)
	}
	return &r
}

// RetrySeed is the seed of a request's try (1 for the first retry): a
// hash of its seed (or, without one, its sample) and the try, in
// [0, 2^31).
func RetrySeed(seed any, sample string, try int) int64 {
	h := fnv.New64a()
	if seed != nil {
		fmt.Fprintf(h, "seed:%v", seed)
	} else {
		fmt.Fprintf(h, "sample:%s", sample)
	}
	fmt.Fprintf(h, "/try:%d", try)
	return int64(h.Sum64() & (1<<31 - 1))
}

// check says what is wrong with resp, "" when nothing is.
func (c *checker) check(want *compiled, resp *inference.Response) string {
	if c.onLength && resp.FinishReason == "length" {
		return "the reply was cut at max_tokens (finish_reason length, generate.retry_on)"
	}
	if want == nil {
		return ""
	}
	content := resp.Message.Content
	dec := json.NewDecoder(strings.NewReader(content))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Sprintf("the reply is not JSON (response_format asks for it): %v", err)
	}
	if dec.More() {
		return "the reply holds more than one JSON value (response_format asks for one)"
	}
	if want.schema == nil {
		if _, ok := v.(map[string]any); !ok {
			return fmt.Sprintf("the reply is %s, response_format json_object asks for an object", pipeline.JSONKind(v))
		}
		return ""
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(content))
	if err != nil {
		return fmt.Sprintf("the reply is not JSON: %v", err)
	}
	if err := want.schema.Validate(inst); err != nil {
		return "the reply does not match response_format's schema: " + describe(err)
	}
	return ""
}

// describe names where a validation error failed: the schema path of
// its deepest cause, the place in the reply, and what is wrong.
func describe(err error) string {
	ve, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return err.Error()
	}
	out := ve.BasicOutput()
	var leaf *jsonschema.OutputUnit
	for i := range out.Errors {
		u := &out.Errors[i]
		if u.Error != nil && (leaf == nil || len(u.KeywordLocation) >= len(leaf.KeywordLocation)) {
			leaf = u
		}
	}
	if leaf == nil {
		return strings.ReplaceAll(ve.Error(), "\n", " ")
	}
	inst := leaf.InstanceLocation
	if inst == "" {
		inst = "/"
	}
	return fmt.Sprintf("schema path %s (reply at %s): %s", leaf.KeywordLocation, inst, leaf.Error.String())
}

// wanted returns the check req's response_format asks for: nil for
// none, a compiled with no schema for json_object.
func (c *checker) wanted(req *inference.Request) (*compiled, error) {
	rf, ok := req.Params["response_format"].(map[string]any)
	if !ok {
		return nil, nil
	}
	switch rf["type"] {
	case "json_object":
		return &compiled{}, nil
	case "json_schema":
	default:
		return nil, nil
	}
	js, _ := rf["json_schema"].(map[string]any)
	schema, ok := js["schema"]
	if !ok {
		return nil, fmt.Errorf("response_format: json_schema without a schema (json_schema.schema)")
	}
	key, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("response_format.json_schema.schema: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.schemas[string(key)]; ok {
		return s, s.err
	}
	s := compile(key)
	if len(c.schemas) < maxSchemas {
		c.schemas[string(key)] = s
	}
	return s, s.err
}

// compile compiles a schema given as JSON. Its $refs resolve within it:
// nothing is fetched.
func compile(schema []byte) *compiled {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return &compiled{err: fmt.Errorf("response_format.json_schema.schema: %v", err)}
	}
	comp := jsonschema.NewCompiler()
	comp.UseLoader(noLoader{})
	const url = "response_format.json"
	if err := comp.AddResource(url, doc); err != nil {
		return &compiled{err: fmt.Errorf("response_format.json_schema.schema: %v", err)}
	}
	s, err := comp.Compile(url)
	if err != nil {
		return &compiled{err: fmt.Errorf("response_format.json_schema.schema: %v", err)}
	}
	return &compiled{schema: s}
}

// noLoader refuses every schema outside the request's own.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: only the schema in response_format is read", url)
}
