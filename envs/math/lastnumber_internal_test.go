package math

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// lastNumberWhole is lastNumber as a scan of the whole text: the
// reference the windowed scan must agree with.
func lastNumberWhole(s string) (string, bool) {
	locs := numberRe.FindAllStringIndex(s, -1)
	if len(locs) == 0 {
		return "", false
	}
	at := locs[len(locs)-1]
	last := s[at[0]:at[1]]
	if last[0] == '-' && at[0] > 0 && isWordByte(s[at[0]-1]) {
		last = last[1:]
	}
	return strings.Join(strings.Fields(last), ""), true
}

func checkLastNumber(t *testing.T, s string) {
	t.Helper()
	got, gok := lastNumber(s)
	want, wok := lastNumberWhole(s)
	if got != want || gok != wok {
		t.Fatalf("lastNumber(%q) = %q %v, a scan of the whole text gives %q %v", s, got, gok, want, wok)
	}
}

// The windowed scan finds what a scan of the whole text finds: on the
// cases where a number's start depends on what lies before it, and on
// random texts of the bytes numbers are made of.
func TestLastNumberAsWholeScan(t *testing.T) {
	for _, s := range []string{
		"", "no digits", "42", "x42", "a 1,234,567 b", "1,2345", "12,345,67", "-3", "pages 10-12",
		"3 / 4", "1 2 3 4 5", "1e5", "1e", "2.5e-3x", ".5", "x.5", "1.2.3", "9,999.5 / 7 then ]8",
		"é12", "12é", "\t7\n", "1/ 2/ 3", "--5", "e-5", "3,", "1,000,000,000,000", strings.Repeat("9", 1000),
	} {
		checkLastNumber(t, s)
	}
	const alphabet = "0123456789,.-+eE/ \t\nxa]é"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		checkLastNumber(t, string(b))
	}
}

// A long reply: the number at its end is found.
func TestLastNumberLongReply(t *testing.T) {
	s := strings.Repeat("word 12 ", 1<<20) + "so 1,234."
	if got, ok := lastNumber(s); !ok || got != "1,234" {
		t.Fatalf("lastNumber = %q %v", got, ok)
	}
}

// BenchmarkLastNumber: the windowed scan against a scan of the whole text,
// on 16 MiB of prose with numbers in it, and on 16 MiB without a digit.
func BenchmarkLastNumber(b *testing.B) {
	texts := map[string]string{
		"prose":     strings.Repeat("the sum of 12 and 30 is ", 16<<20/24) + "42.",
		"no-digits": strings.Repeat("x", 16<<20),
	}
	for _, name := range []string{"prose", "no-digits"} {
		s := texts[name]
		for _, f := range []struct {
			name string
			fn   func(string) (string, bool)
		}{{"window", lastNumber}, {"whole", lastNumberWhole}} {
			b.Run(name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(int64(len(s)))
				for b.Loop() {
					f.fn(s)
				}
			})
		}
	}
}

func FuzzLastNumber(f *testing.F) {
	for _, s := range []string{"1,234", "a -5 b", "3 / 4", "1e5x", "x.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkLastNumber(t, s) })
}
