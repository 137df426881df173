package openaibatch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v17/arrow"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks"
)

// Key is the config key that turns the files on.
const Key = "output.openai_batch"

func init() {
	sinks.RegisterPart(sinks.PartSpec{
		Key:   Key,
		On:    func(s sinks.Settings) bool { on, _ := s.Setting(Key); return on == true },
		Keeps: func(sinks.Settings, string) bool { return true },
		New:   func(env sinks.PartEnv) (sinks.Part, error) { return New(env.Dir) },
		Pair:  Pair,
	})
}

// Files writes OpenAI's Batch output and error files (output.openai_batch)
// beside the Parquet parts of every output directory, a registered
// sinks.Part: the lines of the rows of a directory's open part go to its
// two staged files, which are renamed into place as the part commits,
// before the part (whose rename commits them all), and dropped when it is
// aborted. A resume removes the files left without their part (Pair), so
// that every committed row has exactly one line.
type Files struct {
	dir  string // OUTPUT/openai_batch
	open map[string]*batchPart
}

var _ sinks.Part = (*Files)(nil)

// batchPart is the staged pair of files of one directory's open part.
type batchPart struct {
	files [2]*stagedLines // output, errors
}

// stagedLines is one staged JSONL file.
type stagedLines struct {
	f *durable.File
	w *bufio.Writer
}

var batchKinds = [2]string{schema.OpenAIBatchOutput, schema.OpenAIBatchErrors}

// New makes OUTPUT/openai_batch and returns the Files writing into it.
func New(outDir string) (*Files, error) {
	dir := filepath.Join(outDir, schema.OpenAIBatchDir)
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", Key, err)
	}
	return &Files{dir: dir, open: map[string]*batchPart{}}, nil
}

// Stage stages the lines of the groups' rollouts for dest's open part.
func (b *Files) Stage(_ context.Context, dest string, _ arrow.Record, groups []*pipeline.Group) error {
	p := b.open[dest]
	if p == nil {
		p = &batchPart{}
		b.open[dest] = p
	}
	for _, g := range groups {
		for _, r := range g.Rollouts {
			line, failed, err := batchLine(r)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", Key, r.TrajID, err)
			}
			k := 0
			if failed {
				k = 1
			}
			s := p.files[k]
			if s == nil {
				f, err := durable.Create(filepath.Join(b.dir, batchKinds[k]+"-"+dest+schema.JSONLExt), 0o644)
				if err != nil {
					return fmt.Errorf("%s: %w", Key, err)
				}
				s = &stagedLines{f: f, w: bufio.NewWriterSize(f, 64<<10)}
				p.files[k] = s
			}
			// A buffered writer keeps its first error: WriteByte returns it.
			_, _ = s.w.Write(line)
			if err := s.w.WriteByte('\n'); err != nil {
				return fmt.Errorf("%s: %w", Key, err)
			}
		}
	}
	return nil
}

// Commit renames dest's staged files into place beside the part being
// committed as final (its part number names them), synced first.
func (b *Files) Commit(dest, final string) error {
	n, ok := sinks.PartNumber(final)
	if !ok {
		return fmt.Errorf("%s: %s is not a part file", Key, final)
	}
	p := b.open[dest]
	delete(b.open, dest)
	if p == nil {
		return nil
	}
	// Each file's rename (and its directory's sync) comes before the
	// part's own, so that it survives a crash the part survives.
	for k, s := range p.files {
		if s == nil {
			continue
		}
		err := s.w.Flush()
		if err == nil {
			err = s.f.CommitAs(filepath.Join(b.dir, schema.OpenAIBatchName(batchKinds[k], dest, n)))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", Key, errors.Join(err, p.drop()))
		}
		p.files[k] = nil
	}
	return nil
}

// Abort drops dest's staged files.
func (b *Files) Abort(dest string) error {
	p := b.open[dest]
	if p == nil {
		return nil
	}
	delete(b.open, dest)
	return p.drop()
}

// drop closes and removes the part's staged files; it returns every
// error met (a staged file left behind is removed by the next run).
func (p *batchPart) drop() error {
	var errs []error
	for k, s := range p.files {
		if s != nil {
			if err := s.f.Abort(); err != nil {
				errs = append(errs, err)
			}
			p.files[k] = nil
		}
	}
	return errors.Join(errs...)
}

// Pair removes from OUTPUT/openai_batch the staged files of a run that
// stopped, and the files whose part was never committed (a crash between
// the two renames of a commit): their rows are redone.
func Pair(outDir string) error {
	return sinks.PairFiles(outDir, schema.OpenAIBatchDir, batchFileOf)
}

// batchFileOf reads the directory and part number an OpenAI Batch file's
// name (schema.OpenAIBatchName) gives.
func batchFileOf(name string) (dest string, n int, ok bool) {
	rest, ok := strings.CutSuffix(name, schema.JSONLExt)
	if !ok {
		return "", 0, false
	}
	for _, kind := range batchKinds {
		if r, found := strings.CutPrefix(rest, kind+"-"); found {
			i := strings.LastIndexByte(r, '-')
			if i <= 0 {
				return "", 0, false
			}
			n, err := strconv.Atoi(r[i+1:])
			if err != nil {
				return "", 0, false
			}
			return r[:i], n, true
		}
	}
	return "", 0, false
}

// batchOutputLine is one line of an OpenAI Batch output or error file.
type batchOutputLine struct {
	ID       string         `json:"id"`
	CustomID string         `json:"custom_id"`
	Response *batchResponse `json:"response"`
	Error    *batchError    `json:"error"`
}

type batchResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type batchError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// batchLine is r's line, and whether it goes to the error file: a row
// with a reply has the server's reply as its body (its last reply, for a
// row of several turns; a reply built from the row when the client keeps
// no bodies: an embedder's or the simulator's); a failed row, or one that
// ended without a reply, has an error.
func batchLine(r *pipeline.Rollout) ([]byte, bool, error) {
	l := batchOutputLine{ID: "batch_req_" + r.TrajID, CustomID: r.TrajID}
	if r.Task != nil && r.Task.CustomID != "" {
		l.CustomID = r.Task.CustomID
	}
	switch {
	case r.Status == pipeline.StatusOK && r.NumTurns > 0:
		body := r.Response
		if body == nil {
			var err error
			if body, err = builtReply(r); err != nil {
				return nil, false, err
			}
		}
		l.Response = &batchResponse{StatusCode: 200, RequestID: r.RequestID, Body: body}
	case r.Status == pipeline.StatusOK:
		l.Error = &batchError{Code: "no_reply", Message: "the row ended before a reply (finish_reason " + r.FinishReason + ")"}
	default:
		if r.HTTPStatus != 0 {
			l.Response = &batchResponse{StatusCode: r.HTTPStatus, Body: json.RawMessage("null")}
		}
		code := r.ErrorClass
		if code == "" {
			code = string(r.Status)
		}
		l.Error = &batchError{Code: code, Message: r.Error}
	}
	// Marshal would escape <, > and & in the body: the encoder keeps
	// them as the server sent them (it only puts the body on one line).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		return nil, false, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), l.Error != nil, nil
}

// builtReply is a chat.completion object of r's last reply, for a client
// that keeps no reply bodies.
func builtReply(r *pipeline.Rollout) (json.RawMessage, error) {
	var last *pipeline.Message
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == pipeline.RoleAssistant {
			last = &r.Messages[i]
			break
		}
	}
	msg := map[string]any{"role": "assistant", "content": ""}
	if last != nil {
		msg["content"] = last.Content
		if len(last.ToolCalls) > 0 {
			calls := make([]map[string]any, len(last.ToolCalls))
			for i, c := range last.ToolCalls {
				calls[i] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
			}
			msg["tool_calls"] = calls
		}
	}
	reply := map[string]any{
		"id": "chatcmpl-" + r.TrajID, "object": "chat.completion", "model": r.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": r.FinishReason}},
	}
	if r.NumTurns == 1 {
		// The row's tokens are its one reply's.
		reply["usage"] = map[string]any{"prompt_tokens": r.PromptTokens, "completion_tokens": r.CompletionTokens, "total_tokens": r.PromptTokens + r.CompletionTokens}
	}
	return json.Marshal(reply)
}
