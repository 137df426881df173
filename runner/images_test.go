package runner_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/trajflow/trajflow/config"
	"github.com/trajflow/trajflow/inference/sim"
	"github.com/trajflow/trajflow/internal/leak"
	"github.com/trajflow/trajflow/pipeline"
	"github.com/trajflow/trajflow/runner"
	"github.com/trajflow/trajflow/schema"
	"github.com/trajflow/trajflow/sinks/images"
	"github.com/trajflow/trajflow/stages/generate"
)

// chatBodies keeps the body of every chat request a server receives.
type chatBodies struct {
	h    http.Handler
	mu   sync.Mutex
	sent [][]byte
}

func (c *chatBodies) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.URL.Path == "/v1/chat/completions" {
		c.mu.Lock()
		c.sent = append(c.sent, body)
		c.mu.Unlock()
	}
	c.h.ServeHTTP(w, r)
}

// vlmRows are the example's rows: each one's image data URL.
func vlmRows(t *testing.T) (path string, urls []string) {
	t.Helper()
	root, _ := filepath.Abs("..")
	path = filepath.Join(root, "examples/vlm/tasks.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var row struct {
			Messages []struct {
				Content []struct {
					ImageURL struct{ URL string } `json:"image_url"`
				} `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		urls = append(urls, row.Messages[0].Content[1].ImageURL.URL)
	}
	return path, urls
}

func vlm(t *testing.T, sets ...string) *config.Config {
	t.Helper()
	root, _ := filepath.Abs("..")
	path, _ := vlmRows(t)
	sets = append([]string{"source.path=" + path, "output.dir=" + t.TempDir(), "run.progress=0"}, sets...)
	cfg, err := config.Load(filepath.Join(root, "examples/vlm/config.yaml"), sets)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Rows with data-URL images are accepted, sent to the server as OpenAI
// image parts, and stored: by reference (the bytes under images/, found
// again from the hash) or inline.
func TestImageRowsOverHTTP(t *testing.T) {
	defer leak.Check(t)()
	_, urls := vlmRows(t)
	for _, mode := range []string{"reference", "inline"} {
		t.Run(mode, func(t *testing.T) {
			s := sim.New(sim.Options{Seed: 5, Accuracy: 0.7, Model: "sim-vlm"})
			defer s.Close()
			rec := &chatBodies{h: s.Handler()}
			srv := httptest.NewServer(rec)
			defer srv.Close()
			cfg := vlm(t, "generate.endpoints=["+srv.URL+"/v1]", "output.images="+mode)
			sum, err := run(t, cfg, runner.Options{})
			if err != nil {
				t.Fatal(err)
			}
			srv.Close()
			n := len(urls) * cfg.Repeat.N
			if sum.OK != int64(n) {
				t.Fatalf("summary %+v", sum)
			}
			// The server saw each image as an image_url part.
			seen := map[string]int{}
			for _, body := range rec.sent {
				var req struct {
					Messages []struct {
						Content json.RawMessage `json:"content"`
					} `json:"messages"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					t.Fatal(err)
				}
				var parts []struct {
					Type     string `json:"type"`
					Text     string `json:"text"`
					ImageURL struct {
						URL string `json:"url"`
					} `json:"image_url"`
				}
				if err := json.Unmarshal(req.Messages[0].Content, &parts); err != nil || len(parts) != 2 ||
					parts[0].Type != "text" || parts[1].Type != "image_url" {
					t.Fatalf("request content %s", req.Messages[0].Content)
				}
				seen[parts[1].ImageURL.URL]++
			}
			for _, u := range urls {
				if seen[u] != cfg.Repeat.N {
					t.Errorf("image %.40s… sent %d times, want %d", u, seen[u], cfg.Repeat.N)
				}
			}
			// Read back with Arrow's Parquet reader.
			rows := readBack(t, cfg.Output.Dir, schema.DataDir)
			if len(rows) != n {
				t.Fatalf("%d rows", len(rows))
			}
			for _, r := range rows {
				want := urls[r.Task.Index]
				p := r.Messages[0].Parts
				if len(p) != 2 || p[0].Type != pipeline.PartText || p[1].Type != pipeline.PartImage || r.Messages[0].Content != p[0].Text {
					t.Fatalf("%s: parts %+v", r, p)
				}
				// The simulator "sees" the image: it answers its size.
				_, orig, _ := pipeline.ParseDataURL(want)
				answer := r.Messages[len(r.Messages)-1].Content
				if right := strings.Contains(answer, fmt.Sprintf(`\boxed{%d}`, len(orig))); right != (r.Reward == 1) {
					t.Errorf("%s: reward %g for %q (image of %d bytes)", r, r.Reward, answer, len(orig))
				}
				got := p[1].ImageURL
				if mode == "inline" {
					if got != want {
						t.Errorf("%s: inline image %.40s…", r, got)
					}
					continue
				}
				data, ext, err := images.Lookup(filepath.Join(cfg.Output.Dir, schema.ImagesDir), got)
				if err != nil || ext != "png" || !bytes.Equal(data, orig) {
					t.Errorf("%s: %s resolves to %d bytes (%s, %v), want the row's %d", r, got, len(data), ext, err, len(orig))
				}
			}
			files, _ := filepath.Glob(filepath.Join(cfg.Output.Dir, schema.ImagesDir, "*"))
			if mode == "reference" && len(files) != len(urls) || mode == "inline" && len(files) != 0 {
				t.Errorf("%d image files", len(files))
			}
		})
	}
}

// generate.api: tokens cannot send images: each such row is an error
// naming it.
func TestImageRowsRefusedInTokensMode(t *testing.T) {
	cfg := vlm(t, "generate.api=tokens", "run.max_error_rate=1", "source.limit=2")
	sum, err := run(t, cfg, runner.Options{})
	// Every row failed: the run generated nothing, and says so.
	if !errors.Is(err, runner.ErrNothingGenerated) {
		t.Fatalf("err %v", err)
	}
	rows := readBack(t, cfg.Output.Dir, schema.ErrorsDir)
	if len(rows) != 8 || sum.ErrorClasses[generate.ClassImageUnsupported] != 8 {
		t.Fatalf("%d error rows, summary %+v", len(rows), sum)
	}
	for _, r := range rows {
		if !strings.Contains(r.Error, "tasks.jsonl:") || !strings.Contains(r.Error, "holds an image, which generate.api: tokens cannot send") {
			t.Errorf("%s: %s", r, r.Error)
		}
	}
}

// TestImagesStepwise: with step-wise prompts (env.history_length) the
// request still holds the row's image, so examples/vlm scores as its
// whole-chat run does (the simulator answers right at its accuracy, 0.7,
// when it sees the image, and never without it). The rows differ one by
// one: the simulator's draws depend on the prompt's text, which step-wise
// rendering changes.
func TestImagesStepwise(t *testing.T) {
	defer leak.Check(t)()
	_, urls := vlmRows(t)
	rewards := map[string]map[string]float64{}
	for _, c := range []struct {
		name string
		sets []string
	}{
		{"whole chat", nil},
		{"stepwise", []string{"env.history_length=1"}},
	} {
		s := sim.New(sim.Options{Seed: 5, Accuracy: 0.7, Model: "sim-vlm"})
		rec := &chatBodies{h: s.Handler()}
		srv := httptest.NewServer(rec)
		cfg := vlm(t, append([]string{"generate.endpoints=[" + srv.URL + "/v1]"}, c.sets...)...)
		if _, err := run(t, cfg, runner.Options{}); err != nil {
			t.Fatal(err)
		}
		srv.Close()
		s.Close()
		images := 0
		for _, body := range rec.sent {
			for _, u := range urls {
				if bytes.Contains(body, []byte(u)) {
					images++
					break
				}
			}
		}
		if images != len(rec.sent) || images == 0 {
			t.Fatalf("%s: %d of %d requests hold the row's image", c.name, images, len(rec.sent))
		}
		got := map[string]float64{}
		sum := 0.0
		for _, r := range readBack(t, cfg.Output.Dir, schema.DataDir) {
			got[fmt.Sprint(r.Task.Index, "/", r.RolloutIndex)] = r.Reward
			sum += r.Reward
		}
		t.Logf("%s: mean reward %.3f over %d rows", c.name, sum/float64(len(got)), len(got))
		rewards[c.name] = got
	}
	mean := func(m map[string]float64) float64 {
		s := 0.0
		for _, v := range m {
			s += v
		}
		return s / float64(len(m))
	}
	whole, step := rewards["whole chat"], rewards["stepwise"]
	if len(whole) != len(step) || len(whole) == 0 {
		t.Fatalf("%d and %d rows", len(whole), len(step))
	}
	if w, s := mean(whole), mean(step); w < 0.5 || s < 0.5 || math.Abs(w-s) > 0.25 {
		t.Fatalf("mean reward %.3f step-wise, %.3f whole chat: want both near the accuracy 0.7", s, w)
	}
}
