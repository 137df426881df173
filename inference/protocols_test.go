package inference_test

// The protocols of generate.api register from their package
// (inference/openai's protocol files): this package's tests see them as
// a program does.
import _ "github.com/trajflow/trajflow/inference/openai"
