package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/trajflow/trajflow/bench/internal/harness"
)

func TestMain(m *testing.M) {
	harness.MaybeChild()
	os.Exit(m.Run())
}

// TestQuick runs the command's smoke mode, streaming off and on: every
// pair's throughputs are positive, the ratio is there, the gateway runs
// report their added latency, and both ways did the same work (the
// command fails otherwise). No timing is asserted.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: the full suite runs it")
	}
	for _, stream := range []bool{false, true} {
		args := []string{"-quick"}
		if stream {
			args = append(args, "-stream")
		}
		path := filepath.Join(t.TempDir(), "report.json")
		args = append(args, "-json", path)
		var out, errs bytes.Buffer
		if code := run(context.Background(), args, &out, &errs); code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out.String(), errs.String())
		}
		for _, want := range []string{"| pair 1 |", "| pair 2 |", "median ratio gateway/direct: "} {
			if !bytes.Contains(out.Bytes(), []byte(want)) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out.String())
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var rep Report
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Pairs) != 2 || rep.MedianRatio <= 0 || rep.Stream != stream {
			t.Fatalf("%v: report %+v", args, rep)
		}
		for i, p := range rep.Pairs {
			d, g := p.Direct, p.Gateway
			if d.CallsPS <= 0 || g.CallsPS <= 0 || d.SessPS <= 0 || g.SessPS <= 0 || p.Ratio <= 0 {
				t.Errorf("%v: pair %d: throughputs %+v", args, i+1, p)
			}
			if d.Calls != 50*4 || g.Calls != 50*4 || g.CompletionTokens == 0 || g.CompletionTokens != d.CompletionTokens {
				t.Errorf("%v: pair %d: calls %d/%d, completion tokens %d/%d", args, i+1, d.Calls, g.Calls, d.CompletionTokens, g.CompletionTokens)
			}
			if g.ModelP50Ms <= 0 || g.StatsP50Ms <= 0 || g.AddedP99Ms < g.AddedP50Ms {
				t.Errorf("%v: pair %d: latencies %+v", args, i+1, g)
			}
		}
	}
}
