package sim

import (
	"encoding/binary"
	"hash/fnv"
	"math"
)

// mix is splitmix64's finalizer: a bijective scramble of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// key hashes a sequence of numbers into one draw key.
func key(parts ...uint64) uint64 {
	h := uint64(0x6a09e667f3bcc908)
	for _, p := range parts {
		h = mix(h ^ p)
	}
	return h
}

// Draw domains keep independent draws from the same key apart.
const (
	domLenPrompt uint64 = iota + 1
	domLenSample
	domTaskAcc
	domCorrect
	domGroup
	domGroupPerm
	domWrong
	domTurns
	domEnvDelay
	domObs
	domTool
	domWord
	domLogprob
	domFault
	domNoSeed
	domGame
	domGrid
	domRoute
)

// uniform maps a key to [0, 1).
func uniform(k uint64) float64 {
	return float64(mix(k)>>11) / (1 << 53)
}

// normal maps a key to a standard normal draw (Box–Muller).
func normal(k uint64) float64 {
	u1 := uniform(k ^ 0x5851f42d4c957f2d)
	u2 := uniform(k ^ 0x14057b7ef767814f)
	if u1 < 1e-300 {
		u1 = 1e-300
	}
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// hasher hashes strings into a prompt key.
type hasher struct {
	h interface {
		Write([]byte) (int, error)
		Sum64() uint64
	}
}

func newHasher() *hasher { return &hasher{h: fnv.New64a()} }

func (h *hasher) str(s string) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
	_, _ = h.h.Write(n[:])
	_, _ = h.h.Write([]byte(s))
}

func (h *hasher) sum() uint64 { return mix(h.h.Sum64()) }
