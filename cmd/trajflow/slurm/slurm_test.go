package slurm

import (
	"strings"
	"testing"
	"time"
)

func testJob() *Job {
	return &Job{
		Name:          "trajflow-math",
		Binary:        "/opt/trajflow/bin/trajflow",
		Config:        "/home/u/runs/math.yaml",
		Shards:        16,
		Dir:           "/home/u/runs",
		Logs:          "/home/u/runs/math-slurm/logs",
		Output:        "/scratch/u/out",
		MergeOut:      "/scratch/u/out/merged",
		SignalSeconds: 90,
	}
}

// directives returns the #SBATCH lines of a script.
func directives(script string) []string {
	var out []string
	for _, l := range strings.Split(script, "\n") {
		if d, ok := strings.CutPrefix(l, "#SBATCH "); ok {
			out = append(out, d)
		}
	}
	return out
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestArrayScript(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*Job)
		want    []string // #SBATCH lines that must be there
		notWant []string // #SBATCH lines that must not
		body    []string // substrings of the script
	}{
		{
			name: "plain",
			edit: func(*Job) {},
			want: []string{"--job-name=trajflow-math", "--array=0-15", "--requeue", "--open-mode=append",
				"--signal=B:USR1@90", "--output=/home/u/runs/math-slurm/logs/%x-%A_%a.out", "--chdir=/home/u/runs"},
			body: []string{"/opt/trajflow/bin/trajflow run /home/u/runs/math.yaml --set source.shard=auto &\n",
				`scontrol requeue "$SLURM_JOB_ID"`, `exit "$rc"`},
		},
		{
			name: "max parallel",
			edit: func(j *Job) { j.MaxParallel = 4 },
			want: []string{"--array=0-15%4"},
		},
		{
			name: "one shard",
			edit: func(j *Job) { j.Shards = 1 },
			want: []string{"--array=0-0"},
		},
		{
			name: "paths with spaces",
			edit: func(j *Job) {
				j.Binary = "/opt/my tools/trajflow"
				j.Config = "/home/u/my runs/it's.yaml"
				j.Dir = "/home/u/my runs"
				j.Logs = "/home/u/my runs/logs"
			},
			want: []string{`--output="/home/u/my runs/logs/%x-%A_%a.out"`, `--chdir="/home/u/my runs"`},
			body: []string{`'/opt/my tools/trajflow' run '/home/u/my runs/it'\''s.yaml' --set source.shard=auto`},
		},
		{
			name: "percent in the log directory",
			edit: func(j *Job) { j.Logs = "/data/100%/logs" },
			want: []string{"--output=/data/100%%/logs/%x-%A_%a.out"},
		},
		{
			name: "sets are quoted",
			edit: func(j *Job) { j.Sets = []string{"repeat.n=8", `prompt.user="Compute: {question}"`} },
			body: []string{`--set source.shard=auto --set repeat.n=8 --set 'prompt.user="Compute: {question}"' &`},
		},
		{
			name: "passed-through options",
			edit: func(j *Job) {
				j.Options = []Option{{"--partition=cpu"}, {"--time", "4:00:00"}, {"-A", "my project"}}
			},
			want: []string{"--partition=cpu", "--time 4:00:00", `-A "my project"`, "--job-name=trajflow-math"},
		},
		{
			name:    "a job name replaces the default",
			edit:    func(j *Job) { j.Options = []Option{{"-J", "mine"}} },
			want:    []string{"-J mine"},
			notWant: []string{"--job-name=trajflow-math"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := testJob()
			tc.edit(j)
			s, err := j.Array()
			if err != nil {
				t.Fatal(err)
			}
			d := directives(s)
			for _, w := range tc.want {
				if !has(d, w) {
					t.Errorf("no #SBATCH %s in\n%s", w, s)
				}
			}
			for _, w := range tc.notWant {
				if has(d, w) {
					t.Errorf("#SBATCH %s should not be in\n%s", w, s)
				}
			}
			for _, w := range tc.body {
				if !strings.Contains(s, w) {
					t.Errorf("script lacks %q:\n%s", w, s)
				}
			}
			if !strings.HasPrefix(s, "#!/bin/bash\n") {
				t.Errorf("no shebang:\n%s", s)
			}
			// sbatch stops reading #SBATCH lines at the first command.
			lines := strings.Split(s, "\n")
			seenCmd := false
			for _, l := range lines[1:] {
				switch {
				case strings.HasPrefix(l, "#SBATCH"):
					if seenCmd {
						t.Errorf("#SBATCH line after a command: %s", l)
					}
				case l != "" && !strings.HasPrefix(l, "#"):
					seenCmd = true
				}
			}
		})
	}
}

func TestMergeScript(t *testing.T) {
	j := testJob()
	j.Options = []Option{{"--partition=cpu"}}
	j.MergeOut = "/scratch/u/merged out"
	s, err := j.Merge()
	if err != nil {
		t.Fatal(err)
	}
	d := directives(s)
	for _, w := range []string{"--job-name=trajflow-math-merge", "--requeue", "--open-mode=append",
		"--output=/home/u/runs/math-slurm/logs/%x-%j.out", "--chdir=/home/u/runs", "--partition=cpu"} {
		if !has(d, w) {
			t.Errorf("no #SBATCH %s in\n%s", w, s)
		}
	}
	for _, l := range d {
		if strings.HasPrefix(l, "--array") || strings.HasPrefix(l, "--signal") || strings.HasPrefix(l, "--dependency") {
			t.Errorf("merge script has #SBATCH %s", l)
		}
	}
	if want := "exec /opt/trajflow/bin/trajflow merge --out '/scratch/u/merged out' /scratch/u/out\n"; !strings.Contains(s, want) {
		t.Errorf("merge script lacks %q:\n%s", want, s)
	}
}

func TestJobErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Job)
		want string
	}{
		{"no shards", func(j *Job) { j.Shards = 0 }, "--shards must be >= 1"},
		{"negative parallel", func(j *Job) { j.MaxParallel = -1 }, "--max-parallel"},
		{"quote in a path", func(j *Job) { j.Logs = `/tmp/a"b` }, "double quote"},
		{"line break in a path", func(j *Job) { j.Dir = "/tmp/a\nb" }, "line break"},
		{"empty binary", func(j *Job) { j.Binary = "" }, "binary's path is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := testJob()
			tc.edit(j)
			_, err := j.Array()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Array: error %v, want one containing %q", err, tc.want)
			}
			if _, err := j.Merge(); err == nil {
				t.Error("Merge: no error")
			}
		})
	}
}

func TestParseOptions(t *testing.T) {
	for _, tc := range []struct {
		words []string
		want  [][]string
		err   string
	}{
		{words: nil, want: nil},
		{words: []string{"--partition=gpu", "--time", "1:00:00", "-p", "cpu"},
			want: [][]string{{"--partition=gpu"}, {"--time", "1:00:00"}, {"-p", "cpu"}}},
		{words: []string{"--exclusive"}, want: [][]string{{"--exclusive"}}},
		{words: []string{"gpu"}, err: "an option starts with -"},
		{words: []string{"--array=0-3"}, err: "sets it in the scripts"},
		{words: []string{"-a", "0-3"}, err: "sets it in the scripts"},
		{words: []string{"--dependency=afterany:1"}, err: "sets it in the scripts"},
		{words: []string{"-o", "x.out"}, err: "sets it in the scripts"},
		{words: []string{"--no-requeue"}, err: "sets it in the scripts"},
		{words: []string{"--signal=TERM@60"}, err: "sets it in the scripts"},
		{words: []string{"--chdir=/x"}, err: "sets it in the scripts"},
		{words: []string{`--comment=a"b`}, err: "double quote"},
	} {
		got, err := ParseOptions(tc.words)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseOptions(%q): error %v, want %q", tc.words, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseOptions(%q): %v", tc.words, err)
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("ParseOptions(%q) = %q, want %q", tc.words, got, tc.want)
			continue
		}
		for i := range got {
			if strings.Join(got[i], "\x00") != strings.Join(tc.want[i], "\x00") {
				t.Errorf("ParseOptions(%q)[%d] = %q, want %q", tc.words, i, got[i], tc.want[i])
			}
		}
	}
}

func TestParseJobID(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"12345\n", "12345", true},
		{"12345;cluster\n", "12345", true},
		{"  7  ", "7", true},
		{"", "", false},
		{"\n", "", false},
		{";cluster", "", false},
		{"Submitted batch job 12", "", false},
		{"12a", "", false},
		{"-1", "", false},
		{"123456789012345678901", "", false},
	} {
		got, err := ParseJobID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseJobID(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func FuzzParseJobID(f *testing.F) {
	for _, s := range []string{"12345\n", "12345;cluster\n", "", ";", "1;2;3", " 9 ", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseJobID(s)
		if err != nil {
			if id != "" {
				t.Fatalf("error %v with id %q", err, id)
			}
			return
		}
		if id == "" || strings.Trim(id, "0123456789") != "" {
			t.Fatalf("ParseJobID(%q) = %q: not digits", s, id)
		}
		if !strings.HasPrefix(strings.TrimSpace(s), id) {
			t.Fatalf("ParseJobID(%q) = %q: not the answer's start", s, id)
		}
	})
}

func FuzzParseOptions(f *testing.F) {
	f.Add("--partition=gpu\x00--time\x001:00:00")
	f.Add("-p\x00cpu")
	f.Add("--array=1")
	f.Add("x")
	f.Add("--comment=a b c")
	f.Fuzz(func(t *testing.T, joined string) {
		words := strings.Split(joined, "\x00")
		opts, err := ParseOptions(words)
		if err != nil {
			return
		}
		// Every word is kept, in order, and each option starts with "-".
		var back []string
		for _, o := range opts {
			if !strings.HasPrefix(o[0], "-") {
				t.Fatalf("option %q does not start with -", o)
			}
			if _, ok := reserved[o.Name()]; ok {
				t.Fatalf("reserved option %q accepted", o)
			}
			back = append(back, o...)
		}
		if strings.Join(back, "\x00") != strings.Join(words, "\x00") && !(len(back) == 0 && joined == "") {
			t.Fatalf("words %q came back as %q", words, back)
		}
		// The options land in the script, each on its own #SBATCH line.
		j := testJob()
		j.Options = opts
		s, err := j.Array()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(directives(s)); n < len(opts)+6 {
			t.Fatalf("%d #SBATCH lines for %d options:\n%s", n, len(opts), s)
		}
	})
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"10", 10 * time.Minute, true},
		{"10:30", 10*time.Minute + 30*time.Second, true},
		{"2:00:00", 2 * time.Hour, true},
		{"1-0", 24 * time.Hour, true},
		{"1-2", 26 * time.Hour, true},
		{"1-2:30", 26*time.Hour + 30*time.Minute, true},
		{"0-0:1:30", 90 * time.Second, true},
		{"UNLIMITED", 0, true},
		{"infinite", 0, true},
		{"-1", 0, true},
		{"", 0, false},
		{"1:2:3:4", 0, false},
		{"1-2:3:4:5", 0, false},
		{"x", 0, false},
		{"1-", 0, false},
		{"-5", 0, false},
		{"1h", 0, false},
		{"1:-2", 0, false},
		{"999999999-0", 0, false},
	} {
		got, err := ParseTime(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseTime(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestTimeLimit(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want string
		ok   bool
	}{
		{nil, "", false},
		{[]Option{{"--partition=cpu"}}, "", false},
		{[]Option{{"--time=1:00:00"}}, "1:00:00", true},
		{[]Option{{"--time", "30"}}, "30", true},
		{[]Option{{"-t", "5"}, {"--time=7"}}, "7", true},
	} {
		got, ok := TimeLimit(tc.opts)
		if got != tc.want || ok != tc.ok {
			t.Errorf("TimeLimit(%q) = %q, %v; want %q, %v", tc.opts, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"10", "10:30", "2:00:00", "1-2:30:00", "UNLIMITED", "-1", "1-", "::", "999999999-999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseTime(s)
		if err != nil {
			if d != 0 {
				t.Fatalf("error %v with %v", err, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseTime(%q) = %v < 0", s, d)
		}
	})
}
