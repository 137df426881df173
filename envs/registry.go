package envs

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/trajflow/trajflow/pipeline"
	"go.yaml.in/yaml/v3"
)

// Factory builds an environment from its options (the env section's keys
// other than name and the scheduling keys). It should reject unknown keys:
// Options.Decode does.
type Factory func(opts Options) (Env, error)

// Validator checks an environment's options without building it: it
// starts no process and opens no connection. Factories that do either
// register one with RegisterValidated.
type Validator func(opts Options) error

// Spec describes an environment to the registry: how to build it, and
// what its options mean to the rest of trajflow.
type Spec struct {
	// New builds the environment (required).
	New Factory
	// Validate checks the options without building anything; nil when New
	// is free of side effects (Validate then calls New).
	Validate Validator
	// Operational lists the options that decide how fast or how reliably
	// the environment runs (pool sizes, worker counts, timeouts, retries),
	// not what it produces. They are left out of the config's fingerprint,
	// so a resumed run may change them.
	Operational []string
	// Secret lists the options whose values are secrets (for a map, every
	// value in it): they are redacted wherever the config is written and
	// enter the fingerprint only as a keyed hash.
	Secret []string
}

type entry = Spec

var (
	mu        sync.RWMutex
	factories = map[string]entry{}
)

// Register makes an environment available under name. Its factory must be
// free of side effects (no process, no connection): Validate calls it to
// check options. It panics on a duplicate name (a programming error).
func Register(name string, f Factory) { RegisterSpec(name, Spec{New: f}) }

// RegisterValidated is Register for a factory with side effects: validate
// checks the options instead of the factory.
func RegisterValidated(name string, f Factory, validate Validator) {
	RegisterSpec(name, Spec{New: f, Validate: validate})
}

// RegisterSpec makes an environment available under name, with what its
// options mean. It panics on a duplicate name or a nil New (programming
// errors).
func RegisterSpec(name string, s Spec) {
	if s.New == nil {
		panic("envs: environment " + name + " registered without a factory")
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := factories[name]; dup {
		panic("envs: duplicate environment " + name)
	}
	factories[name] = s
}

// Lookup returns the spec registered under name.
func Lookup(name string) (Spec, bool) {
	mu.RLock()
	defer mu.RUnlock()
	s, ok := factories[name]
	return s, ok
}

// Names lists the registered environments.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(factories))
	for n := range factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds the environment called name.
func New(name string, opts Options) (Env, error) {
	e, err := lookup(name, opts)
	if err != nil {
		return nil, err
	}
	return e.New(opts)
}

// Validate checks that name is registered and that its options are
// valid, without starting anything. Errors name their keys as
// section.key.
func Validate(name string, opts Options) error {
	e, err := lookup(name, opts)
	if err != nil {
		return err
	}
	if e.Validate != nil {
		return e.Validate(opts)
	}
	env, err := e.New(opts)
	if c, ok := env.(io.Closer); ok {
		_ = c.Close() // best effort: the environment's shutdown does not touch the output
	}
	return err
}

func lookup(name string, opts Options) (entry, error) {
	mu.RLock()
	e, ok := factories[name]
	mu.RUnlock()
	if !ok {
		have := strings.Join(Names(), ", ")
		if have == "" {
			have = "none registered: import github.com/trajflow/trajflow/envs/builtin or register one"
		}
		return entry{}, &pipeline.KeyError{Key: opts.keyName("name"), Msg: fmt.Sprintf("unknown environment %q (have %s)", name, have)}
	}
	return e, nil
}

// Options are an environment's own config keys.
type Options struct {
	// Section is the config path of the keys, for errors ("env").
	Section string
	Values  map[string]any
}

// Decode decodes the options into v (a pointer to a struct with yaml tags),
// rejecting keys v does not have. Errors name the key as section.key.
func (o Options) Decode(v any) error {
	if len(o.Values) == 0 {
		return nil
	}
	b, err := yaml.Marshal(o.Values)
	if err != nil {
		return fmt.Errorf("%s: %w", o.Section, err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return o.keyError(v, err)
	}
	return nil
}
