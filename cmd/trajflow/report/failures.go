package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/trajflow/trajflow/runner/metrics"
)

// failureSummary counts the lines of failures.jsonl logs by error class.
type failureSummary struct {
	N       int64
	Classes []classCount
}

type classCount struct {
	Class string
	N     int64
}

// maxFailureLine bounds one line of a failures log.
const maxFailureLine = 16 << 20

// readFailures counts the failures.jsonl lines of paths by error class; a
// missing file counts nothing, nil when no file has a line. A line that is
// not a JSON object is an error naming the file and line.
func readFailures(paths []string) (*failureSummary, error) {
	byClass := map[string]int64{}
	var n int64
	for _, path := range paths {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), maxFailureLine)
		line := 0
		for sc.Scan() {
			line++
			if len(sc.Bytes()) == 0 {
				continue
			}
			var rec struct {
				ErrorClass string `json:"error_class"`
			}
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				_ = f.Close() // best effort: read only
				return nil, fmt.Errorf("report: %s:%d: %v", path, line, err)
			}
			if rec.ErrorClass == "" {
				rec.ErrorClass = "(none)"
			}
			byClass[rec.ErrorClass]++
			n++
		}
		err = sc.Err()
		_ = f.Close() // best effort: read only
		if err != nil {
			return nil, fmt.Errorf("report: %s:%d: %v", path, line+1, err)
		}
	}
	if n == 0 {
		return nil, nil
	}
	s := &failureSummary{N: n}
	for k, v := range byClass {
		s.Classes = append(s.Classes, classCount{k, v})
	}
	sort.Slice(s.Classes, func(i, j int) bool { return s.Classes[i].Class < s.Classes[j].Class })
	return s, nil
}

// ErrorClasses are the error rows the charts read (errors/), by class.
func (p *page) ErrorClasses() map[string]int64 { return p.c.errors }

// readLastRun reads the last_run figures of a metrics.json; nil when path
// is "" or missing, or the file has none.
func readLastRun(path string) (*metrics.RunTokens, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var m struct {
		LastRun *metrics.RunTokens `json:"last_run"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("report: %s: %v", path, err)
	}
	return m.LastRun, nil
}
