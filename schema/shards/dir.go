package shards

import (
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/trajflow/trajflow/schema"
)

// Name is a shard's directory name: "00003-of-00016".
func Name(index, count int) string {
	return schema.ShardDirName(index, count)
}

// Dir is the output directory of shard index of count under the run's
// root: ROOT/shards/00003-of-00016. A root with a scheme
// ("s3://bucket/prefix") is joined as a URL path, with forward slashes,
// keeping its scheme and bucket.
func Dir(root string, index, count int) string {
	if scheme, rest, ok := strings.Cut(root, "://"); ok && scheme != "" && !strings.ContainsAny(scheme, `/\`) {
		return scheme + "://" + path.Join(rest, schema.ShardsDir, Name(index, count))
	}
	return filepath.Join(root, schema.ShardsDir, Name(index, count))
}

// ParseName reads a shard directory's name ("00003-of-00016"); ok is false
// for any other name.
func ParseName(name string) (index, count int, ok bool) {
	a, b, found := strings.Cut(name, "-of-")
	if !found {
		return 0, 0, false
	}
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n < 1 || i < 0 || i >= n || Name(i, n) != name {
		return 0, 0, false
	}
	return i, n, true
}
