package sources

import (
	"slices"
	"testing"
)

// A row's stop_strings field (NeMo RL's datum key) becomes the task's
// stop strings; anything but a list of non-empty strings is a bad row
// naming the key.
func TestRowStopStrings(t *testing.T) {
	tests := []struct {
		row  string
		want []string
		err  string
	}{
		{`{"question": "q", "stop_strings": ["</answer>", "\n\n"]}`, []string{"</answer>", "\n\n"}, ""},
		{`{"question": "q", "stop_strings": null}`, nil, ""},
		{`{"question": "q"}`, nil, ""},
		{`{"responses_create_params": {"input": "hi"}, "stop_strings": ["STOP"]}`, []string{"STOP"}, ""},
		{`{"question": "q", "stop_strings": "</answer>"}`, nil, "stop_strings: want a list of strings, got a string"},
		{`{"question": "q", "stop_strings": ["a", 3]}`, nil, "stop_strings[1]: want a string, got a number"},
		{`{"question": "q", "stop_strings": [""]}`, nil, "stop_strings[0]: an empty stop string"},
	}
	for _, tt := range tests {
		p := writeFile(t, "t.jsonl", tt.row+"\n")
		tasks, err := readAll(t, Config{Path: p}, Options{})
		if tt.err != "" {
			if err == nil || err.Error() != p+":1: "+tt.err {
				t.Errorf("%s: err %v, want %s", tt.row, err, tt.err)
			}
			continue
		}
		if err != nil || len(tasks) != 1 || !slices.Equal(tasks[0].StopStrings, tt.want) {
			t.Errorf("%s: %v %v", tt.row, tasks, err)
		}
	}
}
