package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"
)

func upload(t *testing.T, base string, data []byte) string {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "in.jsonl")
	fw.Write(data)
	mw.Close()
	resp, err := http.Post(base+"/v1/files", mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var f struct{ ID string }
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	json.NewDecoder(resp.Body).Decode(&f)
	return f.ID
}

func getJSON(t *testing.T, u string, v any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(v)
	return resp.StatusCode
}

func TestBatchAPI(t *testing.T) {
	s, base := startHTTP(t, Options{Seed: 1})
	var in bytes.Buffer
	for i := range 5 {
		fmt.Fprintf(&in, `{"custom_id": "r%d", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "sim", "messages": [{"role": "user", "content": "What is %d + 1?"}], "max_tokens": 20}}`+"\n", i, i)
	}
	// A request the server refuses goes to the error file.
	in.WriteString(`{"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "sim", "messages": "nope"}}` + "\n")
	fid := upload(t, base, in.Bytes())
	for i := range 3 {
		body := fmt.Sprintf(`{"input_file_id": %q, "endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": {"k": "v%d"}}`, fid, i)
		if i == 2 {
			body = `{"input_file_id": "file-none", "endpoint": "/v1/chat/completions"}`
		}
		resp, err := http.Post(base+"/v1/batches", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 400, false: 200}[i == 2]; resp.StatusCode != want {
			t.Fatalf("create %d: %d", i, resp.StatusCode)
		}
	}
	var list struct {
		HasMore bool `json:"has_more"`
	}
	var raw struct {
		Data []map[string]any `json:"data"`
	}
	getJSON(t, base+"/v1/batches?limit=1", &list)
	if !list.HasMore {
		t.Fatal("limit 1 of 2 batches: has_more false")
	}
	getJSON(t, base+"/v1/batches", &raw)
	if len(raw.Data) != 2 || raw.Data[0]["metadata"].(map[string]any)["k"] != "v1" {
		t.Fatalf("list (newest first): %v", raw.Data)
	}
	id := raw.Data[1]["id"].(string)
	var b map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; {
		getJSON(t, base+"/v1/batches/"+id, &b)
		if b["status"] == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch not completed: %v", b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	counts := b["request_counts"].(map[string]any)
	if counts["total"] != 6.0 || counts["completed"] != 5.0 || counts["failed"] != 1.0 {
		t.Fatalf("counts %v", counts)
	}
	read := func(fid string) []map[string]any {
		resp, err := http.Get(base + "/v1/files/" + fid + "/content")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []map[string]any
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	out := read(b["output_file_id"].(string))
	if len(out) != 5 {
		t.Fatalf("%d output lines", len(out))
	}
	for i, l := range out {
		r := l["response"].(map[string]any)
		if l["custom_id"] != fmt.Sprintf("r%d", i) || r["status_code"] != 200.0 || r["body"].(map[string]any)["choices"] == nil {
			t.Fatalf("output line %d: %v", i, l)
		}
	}
	errs := read(b["error_file_id"].(string))
	if len(errs) != 1 || errs[0]["custom_id"] != "bad" || errs[0]["response"].(map[string]any)["status_code"] != 400.0 {
		t.Fatalf("error lines %v", errs)
	}
	st := s.BatchStats()
	if st.Uploads != 1 || st.Batches != 2 || st.Submitted["r0"] != 2 || st.Lines != 12 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBatchAPIRejectsBadFiles(t *testing.T) {
	_, base := startHTTP(t, Options{Seed: 1})
	for name, data := range map[string]string{
		"repeated custom_id": `{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}` + "\n" + `{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}`,
		"other url":          `{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}`,
		"not json":           `{custom_id`,
	} {
		fid := upload(t, base, []byte(data))
		resp, err := http.Post(base+"/v1/batches", "application/json", strings.NewReader(fmt.Sprintf(`{"input_file_id": %q, "endpoint": "/v1/chat/completions"}`, fid)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: status %d", name, resp.StatusCode)
		}
	}
}

func TestRateLimitHeadersAnd429(t *testing.T) {
	s, base := startHTTP(t, Options{Seed: 1, RateLimit: RateLimit{RequestsPerMinute: 600, Window: time.Second}}) // 10 a second, a burst of 10
	codes := map[int]int{}
	var last http.Header
	for range 15 {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model": "sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
		if resp.StatusCode == 429 {
			last = resp.Header
		}
	}
	if codes[200] < 10 || codes[200] > 11 || codes[429] < 4 {
		t.Fatalf("codes %v, want 10 (or 11) ok and the rest 429", codes)
	}
	if last.Get("Retry-After") == "" || last.Get("x-ratelimit-remaining-requests") != "0" || last.Get("x-ratelimit-limit-requests") != "600" {
		t.Fatalf("429 headers %v", last)
	}
	if d, err := time.ParseDuration(last.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > time.Second {
		t.Fatalf("reset %q", last.Get("x-ratelimit-reset-requests"))
	}
	if st := s.RateStats(); st.Accepted != int64(codes[200]) || st.Limited != int64(codes[429]) {
		t.Fatalf("stats %+v, codes %v", st, codes)
	}
}

func TestOpenAIDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{20 * time.Millisecond: "20ms", time.Second: "1s", 6 * time.Minute: "6m0s", 1500 * time.Millisecond: "1.5s"} {
		if got := openAIDuration(d); got != want {
			t.Errorf("%s: %q, want %q", d, got, want)
		}
	}
}

func TestTokenRateLimit(t *testing.T) {
	s, base := startHTTP(t, Options{Seed: 1, RateLimit: RateLimit{TokensPerMinute: 600, Window: time.Second}}) // 10 tokens a second
	post := func() *http.Response {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model": "sim", "messages": [{"role": "user", "content": "What is 2 + 2?"}], "max_tokens": 20}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if r := post(); r.StatusCode != 200 || r.Header.Get("x-ratelimit-limit-tokens") != "600" {
		t.Fatalf("first: %d %v", r.StatusCode, r.Header)
	}
	// The first request's prompt and reply put the bucket in debt.
	r := post()
	if r.StatusCode != 429 || r.Header.Get("x-ratelimit-remaining-tokens") != "0" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v", r.StatusCode, r.Header)
	}
	if st := s.RateStats(); st.Accepted != 1 || st.Limited != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBatchCancel(t *testing.T) {
	_, base := startHTTP(t, Options{Seed: 1, BatchDelay: time.Hour})
	fid := upload(t, base, []byte(`{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "sim", "messages": [{"role": "user", "content": "hi"}]}}`+"\n"))
	resp, err := http.Post(base+"/v1/batches", "application/json", strings.NewReader(fmt.Sprintf(`{"input_file_id": %q, "endpoint": "/v1/chat/completions"}`, fid)))
	if err != nil {
		t.Fatal(err)
	}
	var b map[string]any
	json.NewDecoder(resp.Body).Decode(&b)
	resp.Body.Close()
	id := b["id"].(string)
	if b["status"] != "in_progress" {
		t.Fatalf("created: %v", b)
	}
	resp, err = http.Post(base+"/v1/batches/"+id+"/cancel", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); b["status"] != "cancelled"; {
		getJSON(t, base+"/v1/batches/"+id, &b)
		if time.Now().After(deadline) {
			t.Fatalf("not cancelled: %v", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b["error_file_id"] == nil || b["output_file_id"] != nil {
		t.Fatalf("cancelled batch: %v", b)
	}
	if code := getJSON(t, base+"/v1/batches/batch-none", &b); code != 404 {
		t.Fatalf("unknown batch: %d", code)
	}
}
