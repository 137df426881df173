/* A stand-in for miniaudio.h (github.com/mackron/miniaudio), which the
 * Go module zip of Ollama lacks (llama/llama.cpp/vendor is not in it).
 * llama.cpp's mtmd-helper.cpp uses miniaudio only to decode audio input;
 * here every decode fails, so an audio input is refused ("Unable to read
 * WAV audio file") and everything else builds and runs. Used by .ci/run
 * through CGO_CPPFLAGS; see docs/testing.md. */
#ifndef TRAJFLOW_MINIAUDIO_STUB_H
#define TRAJFLOW_MINIAUDIO_STUB_H
#include <stddef.h>

typedef int ma_result;
typedef unsigned long long ma_uint64;
typedef unsigned int ma_uint32;
typedef enum { ma_format_unknown = 0, ma_format_f32 = 5 } ma_format;
typedef enum { ma_encoding_format_unknown = 0, ma_encoding_format_wav } ma_encoding_format;
#define MA_SUCCESS 0
#define MA_ERROR (-1)

typedef struct { ma_format format; ma_uint32 channels; ma_uint32 sampleRate; } ma_decoder_config;
typedef struct { int unused; } ma_decoder;

static ma_decoder_config ma_decoder_config_init(ma_format format, ma_uint32 channels, ma_uint32 sampleRate) {
    ma_decoder_config c;
    c.format = format; c.channels = channels; c.sampleRate = sampleRate;
    return c;
}
static ma_result ma_decoder_init_memory(const void *data, size_t size, const ma_decoder_config *config, ma_decoder *decoder) {
    (void)data; (void)size; (void)config; (void)decoder;
    return MA_ERROR;
}
static ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *decoder, ma_uint64 *length) {
    (void)decoder; *length = 0;
    return MA_ERROR;
}
static ma_result ma_decoder_read_pcm_frames(ma_decoder *decoder, void *out, ma_uint64 frameCount, ma_uint64 *framesRead) {
    (void)decoder; (void)out; (void)frameCount; *framesRead = 0;
    return MA_ERROR;
}
static ma_result ma_decoder_uninit(ma_decoder *decoder) { (void)decoder; return MA_SUCCESS; }
#endif
