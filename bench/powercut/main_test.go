package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestQuick runs the command's smoke mode without its cut points (they
// are the trials of internal/e2e, which the suite runs anyway): the cost
// runs of both builds, with their commit latencies. No timing is
// asserted. `go run ./bench/powercut -quick` runs 4 cut points too.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	args := []string{"-quick", "-cuts", "0"}
	path := filepath.Join(t.TempDir(), "report.json")
	args = append(args, "-json", path)
	var out, errs bytes.Buffer
	if code := run(context.Background(), args, &out, &errs); code != 0 {
		t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out.String(), errs.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	c := rep.Costs
	if c == nil || len(c.SyncedPerCPUs) != 1 || len(c.NoSyncPerCPUs) != 1 || c.SyncedPerCPUs[0] <= 0 || c.NoSyncPerCPUs[0] <= 0 || c.CommitsTimed < 200 || c.CommitP50 <= 0 || c.NoSyncP50 <= 0 {
		t.Errorf("costs: %+v\n%s", c, out.String())
	}
	t.Log(out.String())
}
