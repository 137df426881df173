package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
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
				f.Close()
				return nil, fmt.Errorf("report: %s:%d: %v", path, line, err)
			}
			if rec.ErrorClass == "" {
				rec.ErrorClass = "(none)"
			}
			byClass[rec.ErrorClass]++
			n++
		}
		err = sc.Err()
		f.Close()
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
