// Package ollama holds end-to-end tests of the trajflow binary against a
// real inference engine: Ollama, built from its Go module (llama.cpp and
// ggml included) by .ci/run, serving tiny Qwen2-architecture models that
// carry Qwen3's real tokenizer and chat template (./tinyqwen writes them;
// `ollama create` converts them).
//
// Each test starts `ollama serve` on a free loopback port with
// OLLAMA_MODELS in a temporary directory, creates the models from the
// prepared model directories, and runs the trajflow binary (built once by
// TestMain) as a child process: single-turn and multi-turn runs, tool
// calls parsed by Ollama and answered by the tools environment, `trajflow
// serve` handing out a step, `validate --send`, the engine killed with
// SIGKILL mid-run and the run resumed after a restart, and each row's
// token counts against the usage the engine answered (a recording proxy
// sits between trajflow and Ollama).
//
// The tests need TRAJFLOW_OLLAMA (the ollama binary) and
// TRAJFLOW_OLLAMA_MODELS (a directory holding tinyqwen's tiny/ and
// tiny-tools/), else ~/.cache/trajflow-ollama/{ollama,models}. Without
// them they skip, unless CI=true, where they fail. `bash .ci/run` builds
// and writes both; docs/testing.md gives the commands to do it by hand.
package ollama
