package storage_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/storage"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    storage.URL
		wantErr string
	}{
		{in: "s3://bucket/prefix", want: storage.URL{Bucket: "bucket", Key: "prefix"}},
		{in: "s3://bucket/a/b/", want: storage.URL{Bucket: "bucket", Key: "a/b"}},
		{in: "s3://bucket", want: storage.URL{Bucket: "bucket"}},
		{in: "s3://bucket/", want: storage.URL{Bucket: "bucket"}},
		{in: "s3://my.bucket-1/x.jsonl", want: storage.URL{Bucket: "my.bucket-1", Key: "x.jsonl"}},
		// What filepath.Join leaves of s3://.
		{in: "s3:/bucket/out/shards", want: storage.URL{Bucket: "bucket", Key: "out/shards"}},
		{in: "s3:///bucket", wantErr: "no bucket"},
		{in: "s3://", wantErr: "no bucket"},
		{in: "s3://ab/x", wantErr: "3 to 63"},
		{in: "s3://Bucket/x", wantErr: "lower-case"},
		{in: "s3://-bucket/x", wantErr: "starts and ends"},
		{in: "s3://bucket/a//b", wantErr: "empty path segment"},
		{in: "s3://bucket/a/../b", wantErr: `".." segments`},
		{in: "s3://bucket/a/./b", wantErr: `"." segments`},
		{in: "s3://bucket/a\nb", wantErr: "holds"},
		{in: "s3://bucket/a\\b", wantErr: "holds"},
		{in: "https://bucket/a", wantErr: "not an s3://"},
		{in: "out", wantErr: "not an s3://"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := storage.ParseURL(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseURL(%q) = %v, %v; want error with %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseURL(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		base  string
		elems []string
		want  string
	}{
		{"s3://b1b/out", []string{"shards", "00003-of-00016"}, "s3://b1b/out/shards/00003-of-00016"},
		{"s3://b1b/out/", []string{"manifest.json"}, "s3://b1b/out/manifest.json"},
		{"s3://b1b", []string{"data"}, "s3://b1b/data"},
		{"s3:/b1b/out", []string{"data"}, "s3://b1b/out/data"},
		{"s3://b1b/out/x.parquet", []string{"..", "report.html"}, "s3://b1b/out/report.html"},
		{"out", []string{"shards", "x"}, filepath.Join("out", "shards", "x")},
	} {
		if got := storage.Join(tc.base, tc.elems...); got != tc.want {
			t.Errorf("Join(%q, %q) = %q, want %q", tc.base, tc.elems, got, tc.want)
		}
	}
	// What filepath.Join makes of a URL still names the same place.
	u, err := storage.ParseURL(filepath.Join("s3://b1b/out", "shards", "1"))
	if err != nil || u.String() != "s3://b1b/out/shards/1" {
		t.Errorf("filepath.Join of a URL parses as %v, %v", u, err)
	}
}

// FuzzParseURL: ParseURL never panics, and what it accepts prints as a
// URL that parses back to itself, with a key free of empty, "." and ".."
// segments.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"s3://bucket/prefix", "s3://bucket", "s3:/b1b/x", "s3://b/../x", "s3://bucket/a//b/", "s3://x.y-z/\x00", "s3:///", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := storage.ParseURL(s)
		if err != nil {
			return
		}
		back, err := storage.ParseURL(u.String())
		if err != nil || back != u {
			t.Fatalf("%q parsed as %+v, which prints as %q and parses back as %+v, %v", s, u, u.String(), back, err)
		}
		if u.Key != "" {
			for _, seg := range strings.Split(u.Key, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("%q: key %q has segment %q", s, u.Key, seg)
				}
			}
		}
		if j := storage.Join(u.String(), "data"); !strings.HasPrefix(j, storage.Scheme) {
			t.Fatalf("Join(%q) = %q", u, j)
		}
	})
}

func ExampleJoin() {
	fmt.Println(storage.Join("s3://runs/exp1", "shards", "00003-of-00016"))
	u, _ := storage.ParseURL("s3://runs/exp1/data/part-00000.parquet")
	fmt.Println(u.Bucket, u.Key)
	// Output:
	// s3://runs/exp1/shards/00003-of-00016
	// runs exp1/data/part-00000.parquet
}
