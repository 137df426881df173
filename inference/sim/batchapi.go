package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// The simulator's Batch API, as OpenAI serves it: POST /v1/files (purpose
// batch, a JSONL of {custom_id, method, url, body}), GET /v1/files/{id}
// and /v1/files/{id}/content, POST /v1/batches, GET /v1/batches/{id},
// GET /v1/batches (newest first, limit and after) and POST
// /v1/batches/{id}/cancel. A batch answers each line as the chat or
// completions endpoint would (without injected faults or rate limits),
// after BatchDelay, and writes an output file of the 2xx answers and an
// error file of the others.

// maxUpload bounds an uploaded file.
const maxUpload = 256 << 20

// BatchStats are what the Batch API was asked.
type BatchStats struct {
	// Uploads counts files uploaded; Batches batches created.
	Uploads, Batches int
	// Submitted counts each custom_id over every batch created.
	Submitted map[string]int
	// Lines is the requests of every batch created, summed.
	Lines int
}

type simFile struct {
	ID, Purpose, Filename string
	Created               int64
	data                  []byte
}

func (f *simFile) object() map[string]any {
	return map[string]any{"id": f.ID, "object": "file", "bytes": len(f.data), "created_at": f.Created, "filename": f.Filename, "purpose": f.Purpose}
}

type simBatch struct {
	ID, Endpoint, InputFileID, Window, Status string
	OutputFileID, ErrorFileID                 string
	Created, Completed                        int64
	Metadata                                  map[string]string
	Total, Done, Failed                       int
	Errors                                    []map[string]any
	cancel                                    chan struct{}
}

func (b *simBatch) object() map[string]any {
	o := map[string]any{
		"id": b.ID, "object": "batch", "endpoint": b.Endpoint, "input_file_id": b.InputFileID,
		"completion_window": b.Window, "status": b.Status, "created_at": b.Created,
		"request_counts": map[string]int{"total": b.Total, "completed": b.Done, "failed": b.Failed},
		"metadata":       b.Metadata, "output_file_id": nil, "error_file_id": nil,
	}
	if b.OutputFileID != "" {
		o["output_file_id"] = b.OutputFileID
	}
	if b.ErrorFileID != "" {
		o["error_file_id"] = b.ErrorFileID
	}
	if b.Completed > 0 {
		o["completed_at"] = b.Completed
	}
	if len(b.Errors) > 0 {
		o["errors"] = map[string]any{"object": "list", "data": b.Errors}
	}
	return o
}

type batchAPI struct {
	mu        sync.Mutex
	n         int
	files     map[string]*simFile
	batches   map[string]*simBatch
	order     []string
	uploads   int
	lines     int
	submitted map[string]int
}

func newBatchAPI() *batchAPI {
	return &batchAPI{files: map[string]*simFile{}, batches: map[string]*simBatch{}, submitted: map[string]int{}}
}

// BatchStats returns what the Batch API was asked so far.
func (s *Server) BatchStats() BatchStats {
	b := s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	sub := make(map[string]int, len(b.submitted))
	for k, v := range b.submitted {
		sub[k] = v
	}
	return BatchStats{Uploads: b.uploads, Batches: len(b.order), Submitted: sub, Lines: b.lines}
}

func (b *batchAPI) id(prefix string) string {
	b.n++
	return fmt.Sprintf("%s-sim%06d", prefix, b.n)
}

func (s *Server) batchRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/files", s.uploadFile)
	mux.HandleFunc("GET /v1/files/{id}", s.getFile)
	mux.HandleFunc("GET /v1/files/{id}/content", s.fileContent)
	mux.HandleFunc("POST /v1/batches", s.createBatch)
	mux.HandleFunc("GET /v1/batches/{id}", s.getBatch)
	mux.HandleFunc("GET /v1/batches", s.listBatches)
	mux.HandleFunc("POST /v1/batches/{id}/cancel", s.cancelBatch)
}

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		writeError(w, http.StatusBadRequest, "want multipart/form-data with purpose and file: "+err.Error())
		return
	}
	purpose := r.FormValue("purpose")
	if purpose != "batch" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("purpose %q: this server takes batch files only", purpose))
		return
	}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		writeError(w, http.StatusBadRequest, "no file: "+err.Error())
		return
	}
	defer func() { _ = f.Close() }() // best effort: an uploaded file, read
	data, err := io.ReadAll(f)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	b := s.batches
	b.mu.Lock()
	sf := &simFile{ID: b.id("file"), Purpose: purpose, Filename: hdr.Filename, Created: time.Now().Unix(), data: data}
	b.files[sf.ID] = sf
	b.uploads++
	b.mu.Unlock()
	writeJSON(w, http.StatusOK, sf.object())
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) *simFile {
	b := s.batches
	b.mu.Lock()
	f := b.files[r.PathValue("id")]
	b.mu.Unlock()
	if f == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no file %q", r.PathValue("id")))
	}
	return f
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	if f := s.file(w, r); f != nil {
		writeJSON(w, http.StatusOK, f.object())
	}
}

func (s *Server) fileContent(w http.ResponseWriter, r *http.Request) {
	if f := s.file(w, r); f != nil {
		w.Header().Set("Content-Type", "application/jsonl")
		w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
		_, _ = w.Write(f.data)
	}
}

// batchLine is one line of a batch input file.
type batchLine struct {
	CustomID string          `json:"custom_id"`
	Method   string          `json:"method"`
	URL      string          `json:"url"`
	Body     json.RawMessage `json:"body"`
}

func (s *Server) createBatch(w http.ResponseWriter, r *http.Request) {
	var req struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if req.Endpoint != "/v1/chat/completions" && req.Endpoint != "/v1/completions" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("endpoint %q: want /v1/chat/completions or /v1/completions", req.Endpoint))
		return
	}
	if req.CompletionWindow == "" {
		req.CompletionWindow = "24h"
	}
	if len(req.Metadata) > 16 {
		writeError(w, http.StatusBadRequest, "metadata: at most 16 keys")
		return
	}
	b := s.batches
	b.mu.Lock()
	f := b.files[req.InputFileID]
	b.mu.Unlock()
	if f == nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("input_file_id %q: no such file", req.InputFileID))
		return
	}
	var lines []batchLine
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(f.data))
	sc.Buffer(make([]byte, 1<<20), maxBody)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l batchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("input file line %d: %v", n, err))
			return
		}
		switch {
		case l.CustomID == "":
			writeError(w, http.StatusBadRequest, fmt.Sprintf("input file line %d: no custom_id", n))
			return
		case seen[l.CustomID]:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("input file line %d: custom_id %q repeats", n, l.CustomID))
			return
		case l.Method != http.MethodPost || l.URL != req.Endpoint:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("input file line %d: want method POST and url %s", n, req.Endpoint))
			return
		}
		seen[l.CustomID] = true
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		writeError(w, http.StatusBadRequest, "input file: "+err.Error())
		return
	}
	b.mu.Lock()
	bt := &simBatch{ID: b.id("batch"), Endpoint: req.Endpoint, InputFileID: f.ID, Window: req.CompletionWindow, Status: "in_progress",
		Created: time.Now().Unix(), Metadata: req.Metadata, Total: len(lines), cancel: make(chan struct{})}
	b.batches[bt.ID] = bt
	b.order = append(b.order, bt.ID)
	b.lines += len(lines)
	for _, l := range lines {
		b.submitted[l.CustomID]++
	}
	obj := bt.object()
	b.mu.Unlock()
	s.wg.Add(1)
	go s.runBatch(bt, lines)
	writeJSON(w, http.StatusOK, obj)
}

// runBatch answers a batch's lines, then files its results.
func (s *Server) runBatch(bt *simBatch, lines []batchLine) {
	defer s.wg.Done()
	if d := s.opts.BatchDelay; d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-bt.cancel:
			t.Stop()
		case <-s.closed:
			t.Stop()
			return
		}
	}
	results := make([][]byte, len(lines))
	ok := make([]bool, len(lines))
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i, l := range lines {
		select {
		case <-bt.cancel:
			continue
		default:
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rec := httptest.NewRecorder()
			hr := httptest.NewRequest(http.MethodPost, l.URL, bytes.NewReader(l.Body))
			s.answer(rec, hr, l.Body, openAIAPI(l.URL == "/v1/chat/completions"), false)
			body := rec.Body.Bytes()
			if !json.Valid(body) {
				body, _ = json.Marshal(map[string]any{"error": map[string]any{"message": string(body)}})
			}
			ok[i] = rec.Code >= 200 && rec.Code < 300
			results[i], _ = json.Marshal(map[string]any{
				"id": fmt.Sprintf("batch_req_%s_%d", bt.ID, i), "custom_id": l.CustomID,
				"response": map[string]any{"status_code": rec.Code, "request_id": fmt.Sprintf("req_%s_%d", bt.ID, i), "body": json.RawMessage(body)},
				"error":    nil,
			})
		}()
	}
	wg.Wait()
	var out, errs bytes.Buffer
	b := s.batches
	b.mu.Lock()
	defer b.mu.Unlock()
	cancelled := false
	select {
	case <-bt.cancel:
		cancelled = true
	default:
	}
	for i, l := range lines {
		switch {
		case results[i] == nil:
			line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("batch_req_%s_%d", bt.ID, i), "custom_id": l.CustomID, "response": nil,
				"error": map[string]string{"code": "batch_cancelled", "message": "This request could not be executed before the batch was cancelled."}})
			errs.Write(append(line, '\n'))
			bt.Failed++
		case ok[i]:
			out.Write(append(results[i], '\n'))
			bt.Done++
		default:
			errs.Write(append(results[i], '\n'))
			bt.Failed++
		}
	}
	if out.Len() > 0 {
		f := &simFile{ID: b.id("file"), Purpose: "batch_output", Filename: bt.ID + "_output.jsonl", Created: time.Now().Unix(), data: out.Bytes()}
		b.files[f.ID] = f
		bt.OutputFileID = f.ID
	}
	if errs.Len() > 0 {
		f := &simFile{ID: b.id("file"), Purpose: "batch_output", Filename: bt.ID + "_error.jsonl", Created: time.Now().Unix(), data: errs.Bytes()}
		b.files[f.ID] = f
		bt.ErrorFileID = f.ID
	}
	bt.Status = "completed"
	if cancelled {
		bt.Status = "cancelled"
	}
	bt.Completed = time.Now().Unix()
}

func (s *Server) getBatch(w http.ResponseWriter, r *http.Request) {
	b := s.batches
	b.mu.Lock()
	bt := b.batches[r.PathValue("id")]
	var obj map[string]any
	if bt != nil {
		obj = bt.object()
	}
	b.mu.Unlock()
	if bt == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no batch %q", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

func (s *Server) cancelBatch(w http.ResponseWriter, r *http.Request) {
	b := s.batches
	b.mu.Lock()
	bt := b.batches[r.PathValue("id")]
	var obj map[string]any
	if bt != nil {
		if bt.Status == "in_progress" {
			bt.Status = "cancelling"
			close(bt.cancel)
		}
		obj = bt.object()
	}
	b.mu.Unlock()
	if bt == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no batch %q", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, obj)
}

// listBatches lists batches newest first: limit (default 20, at most 100)
// after the batch id named by after.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, "limit: want 1..100")
			return
		}
		limit = n
	}
	after := r.URL.Query().Get("after")
	b := s.batches
	b.mu.Lock()
	ids := make([]string, len(b.order))
	for i, j := 0, len(b.order)-1; j >= 0; i, j = i+1, j-1 {
		ids[i] = b.order[j]
	}
	start := 0
	if after != "" {
		start = len(ids)
		for i, id := range ids {
			if id == after {
				start = i + 1
				break
			}
		}
	}
	data := []map[string]any{}
	for i := start; i < len(ids) && len(data) < limit; i++ {
		data = append(data, b.batches[ids[i]].object())
	}
	hasMore := start+len(data) < len(ids)
	b.mu.Unlock()
	out := map[string]any{"object": "list", "data": data, "has_more": hasMore}
	if len(data) > 0 {
		out["first_id"] = data[0]["id"]
		out["last_id"] = data[len(data)-1]["id"]
	}
	writeJSON(w, http.StatusOK, out)
}
