package analyze

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseSize reads a size in bytes: a number with an optional unit, B, KB,
// MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024),
// case-insensitive ("256MB", "1.5GiB", "4096").
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1e3, "kb": 1e3, "m": 1e6, "mb": 1e6, "g": 1e9, "gb": 1e9, "t": 1e12, "tb": 1e12,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	}[unit]
	v, err := strconv.ParseFloat(num, 64)
	if num == "" || err != nil || mult == 0 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. 256MB", s)
	}
	b := v * mult
	if b < 1 || b > math.MaxInt64/2 || math.IsNaN(b) {
		return 0, fmt.Errorf("size %q: must be between 1 byte and %d bytes", s, int64(math.MaxInt64/2))
	}
	return int64(b), nil
}
