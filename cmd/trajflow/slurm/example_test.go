package slurm_test

import (
	"fmt"
	"strings"

	"github.com/trajflow/trajflow/cmd/trajflow/slurm"
)

func ExampleJob_Array() {
	opts, err := slurm.ParseOptions([]string{"--partition=cpu", "--time", "4:00:00"})
	if err != nil {
		panic(err)
	}
	job := &slurm.Job{
		Name:          "trajflow-math",
		Binary:        "/usr/local/bin/trajflow",
		Config:        "/home/me/math.yaml",
		Shards:        16,
		MaxParallel:   8,
		Dir:           "/home/me",
		Logs:          "/home/me/math-slurm/logs",
		Output:        "/home/me/out",
		MergeOut:      "/home/me/out/merged",
		SignalSeconds: 60,
		Options:       opts,
	}
	script, err := job.Array()
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(script, "\n") {
		if strings.HasPrefix(line, "#SBATCH") || strings.HasSuffix(line, " &") {
			fmt.Println(line)
		}
	}
	// Output:
	// #SBATCH --job-name=trajflow-math
	// #SBATCH --array=0-15%8
	// #SBATCH --requeue
	// #SBATCH --signal=B:USR1@60
	// #SBATCH --open-mode=append
	// #SBATCH --output=/home/me/math-slurm/logs/%x-%A_%a.out
	// #SBATCH --chdir=/home/me
	// #SBATCH --partition=cpu
	// #SBATCH --time 4:00:00
	// /usr/local/bin/trajflow run /home/me/math.yaml --set source.shard=auto &
}

func ExampleParseJobID() {
	id, err := slurm.ParseJobID("81234;cluster-a\n") // sbatch --parsable on a federation
	fmt.Println(id, err)
	// Output: 81234 <nil>
}
