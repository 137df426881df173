package schema

import (
	"fmt"
	"path"
	"strings"
)

// The layout of an output directory (output.dir): the names of its
// folders and files. Every package that writes or reads an output
// directory names its parts with these constants.
const (
	// DataDir holds the Parquet files of the kept groups.
	DataDir = "data"
	// FilteredDir holds the groups the keep rule dropped (output.filtered).
	FilteredDir = "filtered"
	// StepsDir holds the step rows of the kept groups (output.steps), one
	// file beside each file of DataDir, of the same name.
	StepsDir = "steps"
	// SurplusDir holds the groups finished after the target
	// (groups.on_target: drain).
	SurplusDir = "surplus"
	// ErrorsDir holds the groups with a member that resolved as an error:
	// never kept, and redone by a resumed run (unless run.resume_errors is
	// keep), so that DataDir holds each rollout at most once.
	ErrorsDir = "errors"
	// ImagesDir holds the bytes of the rows' data-URL images, one file per
	// distinct image named by its SHA-256 (output.images: reference).
	ImagesDir = "images"
	// JSONLDir holds NeMo Gym-shaped copies of the committed rows
	// (output.jsonl): one file per Parquet part, GymJSONLName (outputs of
	// earlier versions: JSONLPrefix + NNNNN + JSONLExt, one per run).
	JSONLDir = "jsonl"
	// OpenAIBatchDir holds OpenAI's Batch output and error files
	// (output.openai_batch): for each part file DIR/part-NNNNN.parquet,
	// OpenAIBatchName(OpenAIBatchOutput, DIR, NNNNN) and
	// OpenAIBatchName(OpenAIBatchErrors, DIR, NNNNN), committed with it.
	OpenAIBatchDir = "openai_batch"
	// OpenAIBatchOutput and OpenAIBatchErrors are the kinds of file of
	// OpenAIBatchDir: the answered requests, and the failed ones.
	OpenAIBatchOutput = "output"
	OpenAIBatchErrors = "errors"
	// ShardsDir holds one directory per shard of a sharded run, named by
	// ShardDirName.
	ShardsDir = "shards"

	// RejectsFile logs the input rows a run could not render.
	RejectsFile = "rejects.jsonl"
	// FailuresFile logs every rollout that resolved as an error.
	FailuresFile = "failures.jsonl"
	// MetricsFile holds the run's aggregate metrics, computed from the
	// committed data files.
	MetricsFile = "metrics.json"
	// InputsFile holds each task's rendered request once (NeMo Gym's
	// _materialized_inputs.jsonl), appended as tasks are rendered.
	InputsFile = "inputs.jsonl"
	// AggregateMetricsFile is NeMo Gym's aggregate-metrics layout
	// (rollout_collection.py's _aggregate_metrics.json).
	AggregateMetricsFile = "_aggregate_metrics.json"
	// ServerAggregateMetricsFile holds what environments that are
	// envs.Finishers (the nemo_gym environment's resources server, through
	// /aggregate_metrics) said about the run, in AggregateMetricsFile's
	// layout.
	ServerAggregateMetricsFile = "aggregate_metrics.json"
	// ManifestFile is the run manifest at a sharded run's root.
	ManifestFile = "manifest.json"
	// ShardStatusFile is written in a shard's directory at the end of each
	// run of the shard: whether the shard read its input to the end.
	ShardStatusFile = "shard.json"
	// LockFile is held by a running run in its output directory (a lock
	// object of that name under an s3:// output), so that two runs never
	// write one directory at once.
	LockFile = ".trajflow.lock"
	// SecretKeyFile holds the random key of the keyed hash that stands for
	// secret config values in the fingerprint. It never leaves the
	// directory.
	SecretKeyFile = ".trajflow.key"
	// ReportFile is the name of `trajflow report`'s page inside the output
	// directory when no other is given.
	ReportFile = "report.html"

	// PartPrefix and PartExt name the part files of DataDir, StepsDir,
	// FilteredDir, SurplusDir and ErrorsDir: PartPrefix-NNNNN.PartExt
	// (PartName), written as the hidden .PartPrefix-NNNNN.PartExt.tmp and
	// renamed.
	PartPrefix = "part"
	PartExt    = ".parquet"
	// PartGlob matches the committed part files of a directory.
	PartGlob = PartPrefix + "-*" + PartExt
	// JSONLPrefix and JSONLExt name the files of JSONLDir.
	JSONLPrefix = "rollouts-"
	JSONLExt    = ".jsonl"
)

// PartDirs are the directories of Parquet parts, in the order a commit
// of them all goes: the committer's, and the directories a part sink's
// files may stand beside.
var PartDirs = []string{DataDir, FilteredDir, SurplusDir, ErrorsDir}

// PartName returns the name of part file n: part-00003.parquet.
func PartName(n int) string { return fmt.Sprintf("%s-%05d%s", PartPrefix, n, PartExt) }

// OpenAIBatchName returns the name of the OpenAI Batch file of kind
// (OpenAIBatchOutput or OpenAIBatchErrors) beside part file n of
// directory dir: output-data-00003.jsonl.
func OpenAIBatchName(kind, dir string, n int) string {
	return fmt.Sprintf("%s-%s-%05d%s", kind, dir, n, JSONLExt)
}

// GymJSONLName returns the name of the NeMo Gym JSONL file (output.jsonl,
// in JSONLDir) of part file n of directory dir: rollouts-data-00003.jsonl.
func GymJSONLName(dir string, n int) string {
	return fmt.Sprintf("%s%s-%05d%s", JSONLPrefix, dir, n, JSONLExt)
}

// ShardDirName returns the name of the directory of shard index of count
// under ShardsDir: 00003-of-00016.
func ShardDirName(index, count int) string { return fmt.Sprintf("%05d-of-%05d", index, count) }

// Key-value metadata keys of the Parquet files. MetadataKey (the rollout
// table's schema version) and StepsMetadataKey (the step table's) are
// always written by the Parquet sink; the others by the runner.
const (
	// KeyVersion holds the version of trajflow that wrote the file.
	KeyVersion = "trajflow.version"
	// KeyConfigFingerprint holds the hash of the run-relevant config; a
	// resumed run refuses a mismatch.
	KeyConfigFingerprint = "trajflow.config_fingerprint"
	// KeyRunID holds the run's id.
	KeyRunID = "trajflow.run_id"
	// KeyModel holds the model name.
	KeyModel = "trajflow.model"
	// KeySamplingParams holds the sampling parameters as JSON.
	KeySamplingParams = "trajflow.sampling_params"
	// KeyConfig holds the canonical JSON of the config's semantic keys, so
	// that a refused resume can name what changed.
	KeyConfig = "trajflow.config"
	// KeySource holds the identity of the input as far as it was read when
	// the file was committed.
	KeySource = "trajflow.source"
	// KeyPrice holds the prices of generate.price the rows were made at,
	// per million tokens, when the run set them.
	KeyPrice = "trajflow.price"
)

// MetadataKeyDoc is one key-value metadata key with its meaning.
type MetadataKeyDoc struct {
	Key, Doc string
}

// MetadataKeys returns every key-value metadata key of a rollout file,
// with its meaning (SCHEMA.md's table), in the order SCHEMA.md lists them.
func MetadataKeys() []MetadataKeyDoc {
	return []MetadataKeyDoc{
		{MetadataKey, "the rollout table's schema version (`" + Version + "`, `schema.Version`)"},
		{KeyVersion, "trajflow's version"},
		{KeyConfigFingerprint, "hash of the run-relevant config (input path included); a resumed run refuses a mismatch"},
		{KeyRunID, "the run's id"},
		{KeyModel, "model name"},
		{KeySamplingParams, "the sampling parameters as JSON (secret-named keys redacted)"},
		{KeyConfig, "the canonical JSON of the config's semantic keys (secret values as `hmac-sha256:…`, never the value)"},
		{KeySource, "the input's identity when the file was committed: `{\"path\", \"size\", \"bytes\", \"sha256\"}` (bytes read from the start of the input and their SHA-256)"},
		{KeyPrice, "the prices the rows were made at (`generate.price`, the Batch API's for `generate.api: batch`): `{\"input_per_mtok\", \"cached_input_per_mtok\", \"output_per_mtok\"}`; absent without a price. `stats`, `metrics.json` and the report compute the cost from it"},
	}
}

// BatchStateFile is the output directory's record of the Batch API
// batches a run planned and submitted (generate.api: batch): JSON lines,
// appended and synced before each step it records is taken.
const BatchStateFile = "batches.jsonl"

// The output layout of trajflow serve under output.dir, beside the run's
// own directories: every training step it serves is committed to
// served/step-NNNNNN/ (a copy of the step's kept groups from data/, in
// one part file) before it is served, and served/state.json records which
// groups each step holds, which steps were acknowledged and the policy
// version.
const (
	// ServedDir holds the served steps and the service's state.
	ServedDir = "served"
	// ServedStepPrefix names a step's folder: step-000012.
	ServedStepPrefix = "step-"
	// ServeStateFile is the service's state, replaced atomically.
	ServeStateFile = "state.json"
	// ServeLockFile is held (flock) by a running service in ServedDir, so
	// that two services never hand out the steps of one output.
	ServeLockFile = ".lock"
	// EvalDir holds the evaluations serve.eval runs, one folder a
	// policy version (v-NNNNNN), each an output directory of its own.
	EvalDir = "eval"
	// ReplayDir holds the state of `trajflow serve --replay` over an
	// output directory (its own ServeStateFile and ServeLockFile): the
	// leases and acks of the replay, apart from those of the service
	// that recorded the steps, which it never changes.
	ReplayDir = "replay"
	// KeyServedStep is the Parquet metadata key holding a served step's
	// number, in the step's part file.
	KeyServedStep = "trajflow.served_step"
	// TempSuffix ends the hidden name under which a folder or file is
	// written before it is renamed into place (TempName); the files of
	// internal/durable add a random tail to it (.NAME.tmp-RANDOM).
	TempSuffix = ".tmp"
)

// ServedStepDir is the name of step n's folder under ServedDir.
func ServedStepDir(n int64) string { return fmt.Sprintf("%s%06d", ServedStepPrefix, n) }

// ServedStepFile is the path of step n's one part file under ServedDir:
// step-000012/part-00000.parquet.
func ServedStepFile(n int64) string { return path.Join(ServedStepDir(n), PartName(0)) }

// TempName is the hidden name under which name is written before it is
// renamed into place: .step-000012.tmp.
func TempName(name string) string { return "." + name + TempSuffix }

// IsTemp reports whether a directory entry's name is that of something
// being written: TempName's, or internal/durable's .NAME.tmp-RANDOM. A
// crash can leave one behind; it is never output.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, TempSuffix)
}
