package schema

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// ValidUTF8 returns s with each maximal run of invalid UTF-8 bytes
// replaced by U+FFFD: what a string column holds of s. Every string column
// is valid UTF-8, whatever a server, an environment or an input row
// produced, so that every reader (DuckDB refuses a file with one bad
// string) reads every file.
func ValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// ValidUTF8Bytes is ValidUTF8 for a byte slice; b itself when valid.
func ValidUTF8Bytes(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}
