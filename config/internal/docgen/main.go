// Command docgen writes docs/config.md, the config reference, from the
// component Config structs that config.Config composes: every key's full
// dotted name, its type, its default and its doc comment. The structure
// and the defaults come from the types themselves (reflection over a
// config.Config filled by SetDefaults); the words come from the fields'
// doc comments in the source (go/ast), so those comments are the
// reference. The environments' own options come from each built-in
// environment's Options (or Config) struct.
//
// Run it from anywhere in the module:
//
//	go run ./config/internal/docgen          # writes docs/config.md
//	go run ./config/internal/docgen -check   # exits 1 when docs/config.md is stale
//
// A doc comment's last paragraph "Default: TEXT." states the default in
// words where the typed default says too little (a derived value, an
// environment's option); otherwise the default is the value SetDefaults
// gives.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("o", "", "the file to write (default: docs/config.md of the module)")
	check := flag.Bool("check", false, "compare instead of writing: exit 1 when the file differs")
	flag.Parse()
	root, err := moduleRoot()
	if err != nil {
		fail(err)
	}
	if *out == "" {
		*out = filepath.Join(root, ReferencePath)
	}
	want, err := Reference(root)
	if err != nil {
		fail(err)
	}
	if *check {
		have, err := os.ReadFile(*out)
		if err != nil {
			fail(err)
		}
		if !bytes.Equal(have, want) {
			fail(fmt.Errorf("%s is stale: run go run ./config/internal/docgen", *out))
		}
		return
	}
	if err := os.WriteFile(*out, want, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "docgen:", err)
	os.Exit(1)
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
