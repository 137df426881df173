package shards_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/schema/shards"
)

func TestDir(t *testing.T) {
	for _, tc := range []struct {
		root         string
		index, count int
		want         string
	}{
		{"out", 3, 16, filepath.Join("out", "shards", "00003-of-00016")},
		{"/data/run/", 0, 4, filepath.Join("/data/run", "shards", "00000-of-00004")},
		{"s3://bucket/prefix", 2, 4, "s3://bucket/prefix/shards/00002-of-00004"},
		{"s3://bucket/prefix/", 2, 4, "s3://bucket/prefix/shards/00002-of-00004"},
		{"s3://bucket", 12345, 99999, "s3://bucket/shards/12345-of-99999"},
	} {
		if got := shards.Dir(tc.root, tc.index, tc.count); got != tc.want {
			t.Errorf("Dir(%q, %d, %d) = %q, want %q", tc.root, tc.index, tc.count, got, tc.want)
		}
	}
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		name         string
		index, count int
		ok           bool
	}{
		{"00003-of-00016", 3, 16, true},
		{"00000-of-00001", 0, 1, true},
		{"3-of-16", 0, 0, false},
		{"00016-of-00016", 0, 0, false},
		{"00003-of-00016x", 0, 0, false},
		{"data", 0, 0, false},
	} {
		i, n, ok := shards.ParseName(tc.name)
		if ok != tc.ok || i != tc.index || n != tc.count {
			t.Errorf("ParseName(%q) = %d, %d, %v", tc.name, i, n, ok)
		}
	}
}

func FuzzParseName(f *testing.F) {
	f.Add("00003-of-00016")
	f.Add("x-of-y")
	f.Fuzz(func(t *testing.T, name string) {
		i, n, ok := shards.ParseName(name)
		if ok && shards.Name(i, n) != name {
			t.Fatalf("ParseName(%q) = %d, %d but Name gives %q", name, i, n, shards.Name(i, n))
		}
	})
}

func ExampleDir() {
	fmt.Println(shards.Dir("s3://bucket/run", 3, 16))
	// Output: s3://bucket/run/shards/00003-of-00016
}
