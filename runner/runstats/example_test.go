package runstats_test

import (
	"fmt"

	"github.com/trajflow/trajflow/runner/metrics"
	"github.com/trajflow/trajflow/runner/runstats"
)

// A run halfway to its kept-group target projects twice its cost so far.
func ExampleSnapshot_ProjectedCost() {
	s := runstats.Snapshot{Priced: true, Cost: 1.5, Target: 100, GroupsFinished: 80, GroupsKept: 50}
	p, ok := s.ProjectedCost()
	fmt.Println(metrics.FormatCost(p), ok)
	fmt.Println(s.CostText())
	// Output:
	// 3.0000 true
	// , cost 1.5000 (projected total 3.0000)
}
