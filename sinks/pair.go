package sinks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/schema"
)

// PairFiles is the Pair of a part sink whose files are in OUTPUT/sub: it
// removes the staged files there (schema.IsTemp) and the files whose data
// part is not committed. fileOf reads the output directory and part number
// a file's name gives (ok false: not one of the sink's files, left as it
// is). A missing directory is no error.
func PairFiles(outDir, sub string, fileOf func(name string) (dest string, n int, ok bool)) error {
	dir := filepath.Join(outDir, sub)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		remove := schema.IsTemp(name)
		if !remove {
			dest, n, ok := fileOf(name)
			if !ok {
				continue
			}
			_, err := os.Stat(filepath.Join(outDir, dest, schema.PartName(n)))
			remove = errors.Is(err, os.ErrNotExist)
		}
		if remove {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("resume: %w", err)
			}
		}
	}
	return nil
}

// PartNumber reads NNNNN of a part file's name or path
// (schema.PartName: part-NNNNN.parquet), as Part.Commit gets it.
func PartNumber(final string) (int, bool) {
	digits, ok := strings.CutPrefix(filepath.Base(final), schema.PartPrefix+"-")
	if !ok {
		return 0, false
	}
	digits, ok = strings.CutSuffix(digits, schema.PartExt)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil && n >= 0
}
