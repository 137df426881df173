package parquet

import (
	"sync"

	kzstd "github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/format"
)

// zstdWindow is the encoder's match window. Pages are far smaller than the
// default 8 MiB window, which would cost each encoder a 16 MiB history
// buffer for no gain in ratio.
const zstdWindow = 1 << 20

// zstdCodec is zstd at its fastest level with one long-lived encoder,
// owned by one Writer. parquet-go's own codec keeps its encoders in a
// sync.Pool that every GC empties, and each new encoder allocated a fresh
// history buffer: a run's memory grew with its number of GC cycles. This
// encoder is made once, with a 1 MiB window and the encoder's low-memory
// mode: about 1.5 MiB for the Writer's lifetime. Decode (not used to
// write) goes to parquet-go's codec.
type zstdCodec struct {
	mu  sync.Mutex
	enc *kzstd.Encoder
	err error
}

var zstdDecoder = &zstd.Codec{Level: zstd.SpeedFastest, Concurrency: 1}

func newZstdCodec() *zstdCodec {
	enc, err := kzstd.NewWriter(nil,
		kzstd.WithEncoderLevel(kzstd.SpeedFastest),
		kzstd.WithEncoderConcurrency(1),
		kzstd.WithWindowSize(zstdWindow),
		kzstd.WithLowerEncoderMem(true),
		kzstd.WithZeroFrames(true),
		kzstd.WithEncoderCRC(false),
	)
	return &zstdCodec{enc: enc, err: err}
}

func (c *zstdCodec) String() string { return "ZSTD" }

func (c *zstdCodec) CompressionCodec() format.CompressionCodec { return format.Zstd }

// Encode compresses src into dst[:0] as one zstd frame.
func (c *zstdCodec) Encode(dst, src []byte) ([]byte, error) {
	if c.err != nil {
		return dst[:0], c.err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.enc.EncodeAll(src, dst[:0]), nil
}

// Decode decompresses src into dst[:0].
func (c *zstdCodec) Decode(dst, src []byte) ([]byte, error) {
	return zstdDecoder.Decode(dst, src)
}
