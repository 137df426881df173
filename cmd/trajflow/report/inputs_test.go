package report

import (
	"github.com/trajflow/trajflow/schema"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestInputsOfShardedRoot(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{
		"shards/00000-of-00002/data/part-00000.parquet",
		"shards/00000-of-00002/filtered/part-00000.parquet",
		"shards/00001-of-00002/data/part-00000.parquet",
	} {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{root, filepath.Join(root, "shards", "00000-of-00002", schema.FilteredDir)}
	if got := Inputs(root); !reflect.DeepEqual(got, want) {
		t.Errorf("Inputs = %v, want %v", got, want)
	}
}
