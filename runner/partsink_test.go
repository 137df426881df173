package runner_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/pipeline/pipelinetest"
	"github.com/trajflow/trajflow/readback"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/runner/commit"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
	"github.com/trajflow/trajflow/sinks/parquet"
	"github.com/trajflow/trajflow/stages/collate"
)

// auditSink is a new exactly-once sink, added as docs/architecture.md
// ("Where a new sink goes") says: this one file and the registration line
// in its init. It writes one line per row ("task_index attempt
// rollout_index status") to OUTPUT/audit/DEST-NNNNN.txt beside each part
// DEST/part-NNNNN.parquet, staged with the part, committed and aborted
// with it, and paired with the committed parts at a resume.
// TestPartSinkExactlyOnce runs it; it is on for the output directories
// named auditDirName (a real sink reads its own config key).
type auditSink struct {
	dir  string
	open map[string]*auditStaged
}

type auditStaged struct {
	f *durable.File
	w *bufio.Writer
}

const (
	auditKey     = "output.audit"
	auditSubdir  = "audit"
	auditDirName = "audit-out"
)

func init() {
	sinks.RegisterPart(sinks.PartSpec{
		Key: auditKey,
		On: func(s sinks.Settings) bool {
			dir, _ := s.Setting("output.dir")
			return filepath.Base(fmt.Sprint(dir)) == auditDirName
		},
		Keeps: func(sinks.Settings, string) bool { return true },
		New: func(env sinks.PartEnv) (sinks.Part, error) {
			dir := filepath.Join(env.Dir, auditSubdir)
			return &auditSink{dir: dir, open: map[string]*auditStaged{}}, durable.MkdirAll(dir, 0o755)
		},
		Pair: func(outDir string) error { return sinks.PairFiles(outDir, auditSubdir, auditFileOf) },
	})
}

func (a *auditSink) Stage(_ context.Context, dest string, _ arrow.Record, groups []*pipeline.Group) error {
	s := a.open[dest]
	if s == nil {
		f, err := durable.Create(filepath.Join(a.dir, dest+".txt"), 0o644)
		if err != nil {
			return err
		}
		s = &auditStaged{f: f, w: bufio.NewWriter(f)}
		a.open[dest] = s
	}
	for _, g := range groups {
		for _, r := range g.Rollouts {
			fmt.Fprintf(s.w, "%d %d %d %s\n", r.Task.Index, r.Attempt, r.RolloutIndex, r.Status)
		}
	}
	return nil
}

func (a *auditSink) Commit(dest, final string) error {
	n, ok := sinks.PartNumber(final)
	s := a.open[dest]
	delete(a.open, dest)
	if !ok || s == nil {
		return fmt.Errorf("%s: nothing staged for %s", auditKey, final)
	}
	if err := s.w.Flush(); err != nil {
		return err
	}
	return s.f.CommitAs(filepath.Join(a.dir, auditName(dest, n)))
}

func (a *auditSink) Abort(dest string) error {
	s := a.open[dest]
	delete(a.open, dest)
	if s == nil {
		return nil
	}
	return s.f.Abort()
}

func auditName(dest string, n int) string { return fmt.Sprintf("%s-%05d.txt", dest, n) }

func auditFileOf(name string) (string, int, bool) {
	rest, ok := strings.CutSuffix(name, ".txt")
	i := strings.LastIndexByte(rest, '-')
	if !ok || i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	return rest[:i], n, err == nil
}

var _ sinks.Part = (*auditSink)(nil)

// auditLines reads the committed audit files of out by the part they
// stand beside (DEST/part-NNNNN.parquet).
func auditLines(out string) (map[string][]string, error) {
	entries, err := os.ReadDir(filepath.Join(out, auditSubdir))
	if err != nil {
		return nil, err
	}
	files := map[string][]string{}
	for _, e := range entries {
		dest, n, ok := auditFileOf(e.Name())
		if !ok {
			return nil, fmt.Errorf("%s: not an audit file", e.Name())
		}
		b, err := os.ReadFile(filepath.Join(out, auditSubdir, e.Name()))
		if err != nil {
			return nil, err
		}
		files[filepath.Join(dest, schema.PartName(n))] = strings.Fields(strings.ReplaceAll(string(b), " ", "/"))
	}
	return files, nil
}

// A new exactly-once sink (auditSink: one file, one registration line)
// is staged with each part, committed with it, aborted with it, and
// paired at a resume after a crash between a commit's renames: every
// committed row has exactly one line, beside its part.
func TestPartSinkExactlyOnce(t *testing.T) {
	cfg := quickstart(t, "source.limit=40", "output.batch_rows=8", "output.file_rows=24",
		"output.filtered=true", "groups.keep=nonzero_std")
	out := filepath.Join(filepath.Dir(cfg.Output.Dir), auditDirName)
	cfg.Output.Dir = out
	check := func(stage string) int {
		t.Helper()
		files, err := auditLines(out)
		if err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
		total := 0
		for _, dest := range schema.PartDirs {
			parts, _ := filepath.Glob(filepath.Join(out, dest, "part-*.parquet"))
			for _, p := range parts {
				rel, _ := filepath.Rel(out, p)
				rows, err := readback.File(p)
				if err != nil {
					t.Fatal(err)
				}
				var want []string
				for _, r := range rows {
					want = append(want, fmt.Sprintf("%d/%d/%d/%s", r.Task.Index, r.Attempt, r.RolloutIndex, r.Status))
				}
				got := files[rel]
				slices.Sort(want)
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s: %s has %d lines beside its %d rows", stage, rel, len(got), len(want))
				}
				delete(files, rel)
				total += len(rows)
			}
		}
		if len(files) != 0 {
			t.Fatalf("%s: audit files without their part: %v", stage, slices.Collect(maps.Keys(files)))
		}
		return total
	}
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	first := check("first run")
	if first != 160 {
		t.Fatalf("first run: %d rows, want 160", first)
	}
	// A crash between a commit's renames: the last data part's audit file
	// was renamed into place, the part was not (and, so that its number
	// is not simply taken again, likewise a part 99); a staged file is
	// left.
	parts, _ := filepath.Glob(filepath.Join(out, schema.DataDir, "part-*.parquet"))
	if len(parts) < 2 {
		t.Fatalf("%d data parts, want several", len(parts))
	}
	os.Remove(parts[len(parts)-1])
	for name, line := range map[string]string{
		auditName(schema.DataDir, 99):            "0 0 0 ok",
		schema.TempName(schema.DataDir + ".txt"): "0 0 1 ok",
	} {
		if err := os.WriteFile(filepath.Join(out, auditSubdir, name), []byte(line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := run(t, cfg, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Dispatched == 0 {
		t.Fatal("the resumed run redid nothing")
	}
	if got := check("resumed run"); got != first {
		t.Fatalf("resumed run: %d rows, want %d", got, first)
	}
	if keys := keys(readBack(t, out, schema.DataDir)); len(keys) != len(slices.Compact(slices.Clone(keys))) {
		t.Fatal("a data row is duplicated")
	}

	// An aborted part takes its staged audit file along.
	c, err := commit.Open(cfg, parquet.Options{}, commit.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Keeps(schema.FilteredDir) {
		t.Fatal("the committer does not carry the groups the audit sink stages")
	}
	col := collate.New(memory.NewGoAllocator(), 0)
	g := pipelinetest.Group(1000, 2, 10)
	col.Add(g)
	rec := col.Flush()
	defer rec.Release()
	if err := c.Write(context.Background(), schema.FilteredDir, rec, []*pipeline.Group{g}); err != nil {
		t.Fatal(err)
	}
	if staged := tempFiles(t, filepath.Join(out, auditSubdir)); staged != 1 {
		t.Fatalf("%d staged audit files after a write, want 1", staged)
	}
	if err := c.Abort(); err != nil {
		t.Fatal(err)
	}
	if staged := tempFiles(t, filepath.Join(out, auditSubdir)); staged != 0 {
		t.Fatalf("%d staged audit files after the abort, want 0", staged)
	}
	check("after the abort")
}

// tempFiles counts the staged (temporary) files of dir.
func tempFiles(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if schema.IsTemp(e.Name()) {
			n++
		}
	}
	return n
}
