package runner_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/runner"
)

// A reply that does not match params.response_format's schema never
// becomes an ok row: it is sent again up to generate.invalid_retries
// times (its tokens counted), and a row with no valid reply is an error
// of class invalid_output naming the schema path.
func TestStructuredOutputNeverOK(t *testing.T) {
	var mu sync.Mutex
	tries := map[string]int{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Write([]byte(`{"data":[{"id":"m"}]}`))
			return
		}
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		prompt := req.Messages[len(req.Messages)-1].Content
		mu.Lock()
		tries[prompt]++
		n := tries[prompt]
		mu.Unlock()
		var i int
		fmt.Sscanf(prompt, "q%d", &i)
		// Every third prompt never gets a valid reply, the next one only
		// at its second try.
		content := `{"answer": 7}`
		switch {
		case i%3 == 0:
			content = `{"answer": "seven"}`
		case i%3 == 1 && n == 1:
			content = `The answer is 7.`
		}
		b, _ := json.Marshal(content)
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`, b)
	}))
	defer hs.Close()
	input, _ := writeBatchInput(t, t.TempDir(), 30)
	schema := `{type: json_schema, json_schema: {name: a, schema: {type: object, required: [answer], properties: {answer: {type: integer}}}}}`
	cfg := batchConfig(t, input, hs.URL, "generate.params.response_format="+schema, "generate.invalid_retries=1")
	if _, err := run(t, cfg, runner.Options{}); err != nil {
		t.Fatal(err)
	}
	rows := append(readBack(t, cfg.Output.Dir, runner.DataDir), readBack(t, cfg.Output.Dir, runner.ErrorsDir)...)
	var ok, invalid int
	for _, r := range rows {
		if r.Task.Fields == nil {
			json.Unmarshal(r.Task.Raw, &r.Task.Fields)
		}
		if r.Task.Fields["url"] != "/v1/chat/completions" || strings.Contains(string(r.Task.Raw), `"stream":true`) || strings.Contains(string(r.Task.Raw), `"method":"GET"`) {
			continue // the completions lines and the bad lines
		}
		var i int
		fmt.Sscanf(r.Task.Fields["custom_id"].(string), "req-%d", &i)
		if r.Status == "ok" {
			ok++
			var v struct{ Answer json.Number }
			last := r.Messages[len(r.Messages)-1].Content
			if err := json.Unmarshal([]byte(last), &v); err != nil || v.Answer != "7" {
				t.Fatalf("row %d is ok with the reply %q", i, last)
			}
			if i%3 == 1 && (r.Metrics["discarded_replies"] != 1 || r.Metrics["discarded_prompt_tokens"] != 11 || r.Metrics["discarded_completion_tokens"] != 5) {
				t.Fatalf("row %d: metrics %v, want the thrown-away try counted", i, r.Metrics)
			}
			continue
		}
		if i%3 != 0 || r.ErrorClass != "invalid_output" || !strings.Contains(r.Error, "schema path /properties/answer/type") {
			t.Fatalf("row %d: %s %s %q", i, r.Status, r.ErrorClass, r.Error)
		}
		if r.Metrics["discarded_replies"] != 2 || r.Metrics["discarded_completion_tokens"] != 10 {
			t.Fatalf("row %d: metrics %v, want both tries counted", i, r.Metrics)
		}
		invalid++
	}
	if ok == 0 || invalid == 0 {
		t.Fatalf("%d ok, %d invalid rows: the test checks neither", ok, invalid)
	}
}
