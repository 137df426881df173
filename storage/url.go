package storage

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// Scheme is the URL scheme of object storage paths.
const Scheme = "s3://"

// URL is a parsed s3://bucket/key URL. Key has no leading or trailing
// slash; it is empty for the bucket's root.
type URL struct {
	Bucket string
	Key    string
}

// IsURL reports whether p names object storage: it starts with s3://, or
// with s3:/ (the form filepath.Join and path.Join leave of s3://).
func IsURL(p string) bool {
	return strings.HasPrefix(p, "s3:/")
}

// ParseURL parses s3://bucket[/key]. The bucket follows S3's naming rules
// (3 to 63 characters of lower-case letters, digits, dots and hyphens,
// starting and ending with a letter or digit); the key may not hold empty,
// "." or ".." segments, a backslash, or control characters. The form
// s3:/bucket/key, which filepath.Join("s3://bucket", "key") gives, is
// read as s3://bucket/key.
func ParseURL(s string) (URL, error) {
	rest, ok := strings.CutPrefix(s, Scheme)
	if !ok {
		rest, ok = strings.CutPrefix(s, "s3:/")
		if !ok || strings.HasPrefix(rest, "/") {
			return URL{}, fmt.Errorf("%q is not an s3://bucket/prefix URL", s)
		}
	}
	bucket, key, _ := strings.Cut(rest, "/")
	if err := checkBucket(bucket); err != nil {
		return URL{}, fmt.Errorf("%q: %w", s, err)
	}
	key = strings.TrimSuffix(key, "/")
	if key != "" {
		for _, seg := range strings.Split(key, "/") {
			switch seg {
			case "":
				return URL{}, fmt.Errorf("%q: empty path segment (//)", s)
			case ".", "..":
				return URL{}, fmt.Errorf("%q: %q segments are not allowed", s, seg)
			}
		}
		for _, r := range key {
			if r < 0x20 || r == 0x7f || r == '\\' {
				return URL{}, fmt.Errorf("%q: the key holds %q", s, r)
			}
		}
		if len(key) > 900 {
			return URL{}, fmt.Errorf("%q: the key is longer than 900 bytes", s)
		}
	}
	return URL{Bucket: bucket, Key: key}, nil
}

func checkBucket(b string) error {
	if b == "" {
		return errors.New("no bucket")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q: a bucket name has 3 to 63 characters", b)
	}
	for i, r := range b {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (r == '.' || r == '-') && i > 0 && i < len(b)-1
		if !ok {
			return fmt.Errorf("bucket %q: a bucket name has lower-case letters, digits, dots and hyphens, and starts and ends with a letter or digit", b)
		}
	}
	return nil
}

// String returns the URL as s3://bucket/key.
func (u URL) String() string {
	if u.Key == "" {
		return Scheme + u.Bucket
	}
	return Scheme + u.Bucket + "/" + u.Key
}

// Join returns the URL with elems appended to its key as path elements.
func (u URL) Join(elems ...string) URL {
	all := append([]string{u.Key}, elems...)
	u.Key = strings.Trim(path.Join(all...), "/")
	return u
}

// Prefix is the key as a listing prefix: "" or "key/".
func (u URL) Prefix() string {
	if u.Key == "" {
		return ""
	}
	return u.Key + "/"
}

// Join joins path elements onto base, an s3:// URL or a local path: it is
// filepath.Join for local paths, and keeps the s3:// of a URL
// (Join("s3://b/out", "shards", "00001-of-00004") is
// "s3://b/out/shards/00001-of-00004").
func Join(base string, elems ...string) string {
	if !IsURL(base) {
		return filepath.Join(append([]string{base}, elems...)...)
	}
	rest := strings.TrimLeft(strings.TrimPrefix(base, "s3:"), "/")
	return Scheme + strings.TrimSuffix(path.Join(append([]string{rest}, elems...)...), "/")
}
