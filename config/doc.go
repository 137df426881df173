// Package config reads, overrides, defaults and validates trajflow's run
// config (the YAML of `trajflow run CONFIG.yaml --set section.key=value`).
//
// Every section is a plain struct here, so the whole config can be read in
// one place; the packages that use a section take its struct. Unknown keys
// are errors that name the key's full path and line, and Validate reports
// every problem at once.
package config

//go:generate go run ./internal/docgen
