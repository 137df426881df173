package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/trajflow/trajflow/config"
	_ "github.com/trajflow/trajflow/envs/builtin" // the environments the pods run
	"github.com/trajflow/trajflow/runner"
)

// k8sObject is the part of a Kubernetes object the test reads.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		CompletionMode       string `yaml:"completionMode"`
		Completions          *int   `yaml:"completions"`
		Parallelism          *int   `yaml:"parallelism"`
		BackoffLimitPerIndex *int   `yaml:"backoffLimitPerIndex"`
		AccessModes          []string
		Template             struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	RestartPolicy                 string `yaml:"restartPolicy"`
	TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
	Containers                    []struct {
		Name    string   `yaml:"name"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom any    `yaml:"valueFrom"`
		} `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	} `yaml:"containers"`
	Volumes []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		PersistentVolumeClaim *struct {
			ClaimName string `yaml:"claimName"`
		} `yaml:"persistentVolumeClaim"`
	} `yaml:"volumes"`
}

func readK8s(t *testing.T, path string) []k8sObject {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var out []k8sObject
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, o)
	}
}

// graceMargin is the time a pod needs beyond run.grace: the stop begins,
// metrics.json and shard.json are written, the process exits.
const graceMargin = 15 * time.Second

// TestKubernetesIndexedJob checks the Indexed Job of docs/kubernetes.md
// against what trajflow reads, then runs its pods' commands, one per
// completion index, and its merge Job's command, against the simulator.
func TestKubernetesIndexedJob(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "kubernetes")
	objs := append(readK8s(t, filepath.Join(dir, "indexed-job.yaml")), readK8s(t, filepath.Join(dir, "merge-job.yaml"))...)
	var (
		job, merge *k8sObject
		configMaps = map[string]map[string]string{}
		claims     = map[string]bool{}
	)
	for i := range objs {
		o := &objs[i]
		switch {
		case o.Kind == "ConfigMap":
			configMaps[o.Metadata.Name] = o.Data
		case o.Kind == "PersistentVolumeClaim":
			claims[o.Metadata.Name] = true
		case o.Kind == "Job" && o.Spec.CompletionMode == "Indexed":
			job = o
		case o.Kind == "Job":
			merge = o
		}
	}
	if job == nil || merge == nil {
		t.Fatalf("want an Indexed Job and a merge Job, got %+v", objs)
	}
	if job.APIVersion != "batch/v1" || merge.APIVersion != "batch/v1" {
		t.Errorf("apiVersion %s, %s; want batch/v1", job.APIVersion, merge.APIVersion)
	}
	spec := job.Spec
	if spec.Completions == nil || *spec.Completions < 2 {
		t.Fatalf("completions %v: want a count of shards >= 2", spec.Completions)
	}
	completions := *spec.Completions
	if spec.Parallelism == nil || *spec.Parallelism < 1 || *spec.Parallelism > completions {
		t.Errorf("parallelism %v: want 1 to %d", spec.Parallelism, completions)
	}
	if spec.BackoffLimitPerIndex == nil || *spec.BackoffLimitPerIndex < 1 {
		t.Errorf("backoffLimitPerIndex %v: want >= 1, so that a preempted shard is retried and resumes", spec.BackoffLimitPerIndex)
	}
	pod := spec.Template.Spec
	if pod.RestartPolicy != "Never" { // backoffLimitPerIndex requires it
		t.Errorf("restartPolicy %q, want Never", pod.RestartPolicy)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			// A secret's value: the config checks that the variable is set.
			t.Setenv(e.Name, "from-a-secret")
		}
	}
	if env["TRAJFLOW_SHARD_COUNT"] != strconv.Itoa(completions) {
		t.Errorf("TRAJFLOW_SHARD_COUNT %q, want completions (%d)", env["TRAJFLOW_SHARD_COUNT"], completions)
	}
	if _, set := env["JOB_COMPLETION_INDEX"]; set {
		t.Error("JOB_COMPLETION_INDEX is set by Kubernetes, not by the manifest")
	}

	// The container runs `trajflow run CONFIG --set source.shard=auto`,
	// CONFIG coming from a ConfigMap mounted in the pod.
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(argv) < 3 || argv[0] != "trajflow" || argv[1] != "run" {
		t.Fatalf("container command %q: want trajflow run CONFIG ...", argv)
	}
	if !slices.Contains(argv, "source.shard=auto") || argv[slices.Index(argv, "source.shard=auto")-1] != "--set" {
		t.Errorf("container command %q lacks --set source.shard=auto", argv)
	}
	configPath := argv[2]
	mounts := map[string]string{} // mount path -> volume
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	volume := mounts[filepath.Dir(configPath)]
	var configText string
	dataMount := ""
	for _, v := range pod.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			configText = configMaps[v.ConfigMap.Name][filepath.Base(configPath)]
		}
		if v.PersistentVolumeClaim != nil {
			if !claims[v.PersistentVolumeClaim.ClaimName] {
				t.Errorf("volume %s claims %s, which the manifest does not define", v.Name, v.PersistentVolumeClaim.ClaimName)
			}
			for path, name := range mounts {
				if name == v.Name {
					dataMount = path
				}
			}
		}
	}
	if configText == "" {
		t.Fatalf("%s is not a key of a ConfigMap mounted at %s", configPath, filepath.Dir(configPath))
	}
	if dataMount == "" {
		t.Fatal("no shared volume mounted in the pod")
	}
	var sets []string
	for i := 3; i+1 < len(argv); i++ {
		if argv[i] == "--set" {
			sets = append(sets, argv[i+1])
		}
	}
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(configText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Read(cfgFile, sets)
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(index int) func(string) (string, bool) {
		return func(k string) (string, bool) {
			switch k {
			case "JOB_COMPLETION_INDEX":
				return strconv.Itoa(index), true
			}
			v, ok := env[k]
			return v, ok
		}
	}
	for _, i := range []int{0, completions - 1} {
		if err := runner.Check(cfg, runner.Options{LookupEnv: lookup(i)}); err != nil {
			t.Errorf("index %d: the pod's config does not pass: %v", i, err)
		}
	}
	if err := runner.Check(cfg, runner.Options{LookupEnv: lookup(completions)}); err == nil {
		t.Errorf("index %d (= completions) passes: the shard count is not tied to completions", completions)
	}
	if !strings.HasPrefix(cfg.Output.Dir, dataMount+"/") || !strings.HasPrefix(cfg.Source.Path, dataMount+"/") {
		t.Errorf("output.dir %s and source.path %s must lie on the shared volume %s", cfg.Output.Dir, cfg.Source.Path, dataMount)
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds: Kubernetes' default (30s) may cut the graceful stop")
	}
	if got, want := time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second, cfg.Run.Grace.D()+graceMargin; got < want {
		t.Errorf("terminationGracePeriodSeconds %s: want >= run.grace (%s) + %s", got, cfg.Run.Grace.D(), graceMargin)
	}

	// The merge Job reads the run's root from the same volume.
	mpod := merge.Spec.Template.Spec
	if len(mpod.Containers) != 1 {
		t.Fatalf("merge Job: %d containers", len(mpod.Containers))
	}
	margv := append(slices.Clone(mpod.Containers[0].Command), mpod.Containers[0].Args...)
	if len(margv) < 4 || margv[0] != "trajflow" || margv[1] != "merge" {
		t.Fatalf("merge command %q: want trajflow merge ... ROOT DEST", margv)
	}
	if root := margv[len(margv)-2]; root != cfg.Output.Dir {
		t.Errorf("merge reads %s, the shards write under %s", root, cfg.Output.Dir)
	}
	if dest := margv[len(margv)-1]; !strings.HasPrefix(dest, dataMount+"/") {
		t.Errorf("merge writes %s, off the shared volume %s", dest, dataMount)
	}
	if mpod.RestartPolicy != "Never" && mpod.RestartPolicy != "OnFailure" {
		t.Errorf("merge restartPolicy %q", mpod.RestartPolicy)
	}

	// Run it: each index's pod command with its environment, the shared
	// volume a directory, the endpoints the simulator; then the merge.
	data := t.TempDir()
	tasks := writeTasks(t, t.TempDir(), 40, 5)
	b, err := os.ReadFile(tasks)
	if err != nil {
		t.Fatal(err)
	}
	local := func(p string) string {
		if rest, ok := strings.CutPrefix(p, dataMount+"/"); ok {
			return filepath.Join(data, rest)
		}
		return p
	}
	if err := os.WriteFile(local(cfg.Source.Path), b, 0o644); err != nil {
		t.Fatal(err)
	}
	podConfig := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(podConfig, []byte(strings.ReplaceAll(configText, dataMount+"/", data+"/")), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range completions {
		args := slices.Clone(argv[1:])
		args[1] = podConfig
		args = append(args, "--set", `generate.endpoints=["sim://"]`, "--set", "generate.api_key_env=")
		r := runEnv(t, []string{fmt.Sprintf("JOB_COMPLETION_INDEX=%d", i), "TRAJFLOW_SHARD_COUNT=" + env["TRAJFLOW_SHARD_COUNT"]}, args...)
		if r.code != 0 {
			t.Fatalf("index %d: exit %d\n%s", i, r.code, r.stderr)
		}
	}
	margs := slices.Clone(margv[1:])
	for i, a := range margs {
		margs[i] = local(a)
	}
	if r := run(t, margs...); r.code != 0 || !strings.Contains(r.stderr, fmt.Sprintf("%d of %d shards, all complete", completions, completions)) {
		t.Fatalf("merge: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	got := readDataset(t, filepath.Join(local(margv[len(margv)-1]), "data"))
	if want := 40 * cfg.Repeat.N; len(got.rows) != want {
		t.Fatalf("merged %d rows, want %d (40 tasks, %d samples)", len(got.rows), want, cfg.Repeat.N)
	}
	tasksSeen := map[int64]int{}
	for k := range got.rows {
		tasksSeen[k.TaskIndex]++
	}
	for i := range int64(40) {
		if tasksSeen[i] != cfg.Repeat.N {
			t.Errorf("task %d has %d rows, want %d", i, tasksSeen[i], cfg.Repeat.N)
		}
	}
}
