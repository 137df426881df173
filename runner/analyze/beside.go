package analyze

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/schema"
)

// besideDirs are the row directories an output directory commits beside
// data/: their rows were paid for too, so their cost joins the metrics'
// (metrics.Cost.Dirs), and nothing else of them does.
var besideDirs = []string{schema.FilteredDir, schema.SurplusDir, schema.ErrorsDir}

// besideFiles lists, by directory name, the Parquet files committed
// beside data/ in the output directories among paths (and their shards);
// nil when paths name no output directory with a data/ directory.
func besideFiles(paths []string) (map[string][]string, error) {
	var roots []string
	for _, p := range paths {
		if st, err := os.Stat(filepath.Join(p, schema.DataDir)); err == nil && st.IsDir() {
			roots = append(roots, p)
			continue
		}
		sets, err := Shards([]string{p})
		if err != nil {
			return nil, err
		}
		for _, set := range sets {
			for _, sh := range set.Shards {
				roots = append(roots, sh.Dir)
			}
		}
	}
	if len(roots) == 0 {
		return nil, nil
	}
	out := map[string][]string{}
	for _, root := range roots {
		for _, d := range besideDirs {
			files, err := filepath.Glob(filepath.Join(globEscape(root), d, schema.PartGlob))
			if err != nil {
				return nil, fmt.Errorf("analyze: %s: %w", root, err)
			}
			slices.Sort(files)
			out[d] = append(out[d], files...)
		}
	}
	return out, nil
}

// addBesideCost adds the cost of the rows committed beside data/ in the
// output directories among paths to agg.
func addBesideCost(ctx context.Context, paths []string, agg *metrics.Aggregator, opts StatsOptions) error {
	dirs, err := besideFiles(paths)
	if err != nil || dirs == nil {
		return err
	}
	for _, d := range besideDirs {
		c := metrics.Cost{}
		envs := map[string]metrics.Cost{}
		if files := dirs[d]; len(files) > 0 {
			sub, err := statsFiles(ctx, files, opts, false)
			if err != nil {
				return err
			}
			m := sub.Result()
			if m.Cost != nil {
				c = *m.Cost
			}
			for name, e := range m.Envs {
				if e.Cost != nil {
					envs[name] = *e.Cost
				}
			}
		}
		agg.AddCost(d, c, envs)
	}
	return nil
}
