package analyze_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/runner/analyze"
	pqsink "github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// writeExampleRun writes tasks [from, to) (groups of 4) into dir/data.
func writeExampleRun(dir string, from, to int64) error {
	ctx := context.Background()
	w, err := pqsink.New(filepath.Join(dir, "data"), pqsink.Options{FileRows: 8})
	if err != nil {
		return err
	}
	c := collate.New(memory.DefaultAllocator, 4)
	defer c.Release()
	for task := from; task < to; task++ {
		if rec := c.Add(pipelinetest.Group(task, 4, 64)); rec != nil {
			err := w.Write(ctx, rec)
			rec.Release()
			if err != nil {
				w.Abort()
				return err
			}
		}
	}
	if rec := c.Flush(); rec != nil {
		defer rec.Release()
		if err := w.Write(ctx, rec); err != nil {
			return err
		}
	}
	return w.Close(ctx)
}

func ExampleStats() {
	dir, _ := os.MkdirTemp("", "trajflow-stats")
	defer os.RemoveAll(dir)
	if err := writeExampleRun(dir, 0, 5); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := analyze.Stats(context.Background(), []string{dir}, os.Stdout, analyze.StatsOptions{}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// rows         20
	// status       (error 5, filtered 3, ok 12)
	// scored rows  15           (status ok or filtered)
	// reward       mean 0.6667  std 0.4714     min 0  max 1
	// accuracy     0.6667       10/15 correct  metric "acc" (else reward) > 0
	// tasks        5            complete 0 (0.0000)
	// groups       5            kept 4  dropped 1 (zero_std 1)
	//
	// k  tasks  pass@k  pass^k  mean@k
	// 1  5      0.6667  0.6667  0.6667
	// 2  5      1.0000  0.3333  0.6667
	//
	// per sample         mean   p95  max  total
	// prompt tokens      10.00  10   10   200
	// completion tokens  8.00   8    8    160
	// env tokens         3.00   3    3    60
	// turns              2.00   2    2    40
	// tool calls         0.50   1    1    10
	//
	// natural termination rate  0.6667
	// truncation rate           0.3333
	// max turns rate            0.0000
	// token continuity breaks   15
	//
	// NeMo RL (every row)  natural_termination_rate 1.0000  truncation_rate 0.2500  max_turns_reached_rate 0.0000
	//                      turns total 40  avg 2.00  max 2;  tokens per sample gen 5.00  env 3.00  total 8.00
	//
	// env   rows  scored  reward  accuracy  turns  natural_term
	// math  20    15      0.6667  0.6667    2.00   1.0000
}

func ExampleMerge() {
	dir, _ := os.MkdirTemp("", "trajflow-merge")
	defer os.RemoveAll(dir)
	shard0, shard1 := filepath.Join(dir, "shard0"), filepath.Join(dir, "shard1")
	if err := writeExampleRun(shard0, 0, 6); err != nil {
		fmt.Println(err)
		return
	}
	if err := writeExampleRun(shard1, 6, 12); err != nil {
		fmt.Println(err)
		return
	}
	res, err := analyze.Merge(context.Background(), []string{shard0, shard1}, filepath.Join(dir, "merged"),
		analyze.MergeOptions{FileRows: 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d input files, %d rows\n", len(res.Inputs), res.Rows)
	for _, f := range res.Files {
		fmt.Println(filepath.Base(f))
	}
	// Output:
	// 6 input files, 48 rows
	// part-00000.parquet
	// part-00001.parquet
	// part-00002.parquet
}
