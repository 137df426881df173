package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/pipeline"
)

type counting struct{ n atomic.Int64 }

func (c *counting) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	n := c.n.Add(1)
	if req.Messages[0].Content == "fail" {
		return nil, &inference.Error{Class: inference.ClassServer, Msg: "boom"}
	}
	finish := "stop"
	if req.Messages[0].Content == "aborted" {
		finish = inference.FinishAbort
	}
	return &inference.Response{Message: pipeline.Message{Role: "assistant", Content: fmt.Sprintf("reply %d to %s", n, req.Messages[0].Content), TokenIDs: []int32{1, 2}, Logprobs: []float32{-0.125, -1.5}}, FinishReason: finish, PromptTokens: 3, CompletionTokens: 2, Endpoint: "e"}, nil
}

// An answer a pause aborted (a partial output, inference.FinishAbort) is
// passed on and not stored: the same request is sent again; a whole
// answer is stored.
func TestAbortedAnswerIsNotStored(t *testing.T) {
	for _, tc := range []struct {
		content string
		asked   int64
	}{
		{"aborted", 2},
		{"whole", 1},
	} {
		t.Run(tc.content, func(t *testing.T) {
			store, err := Open(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			inner := &counting{}
			c := New(inner, store, keyOf, nil)
			for range 2 {
				if _, err := c.Complete(context.Background(), req(tc.content, "s0")); err != nil {
					t.Fatal(err)
				}
			}
			if n := inner.n.Load(); n != tc.asked {
				t.Errorf("inner asked %d times, want %d", n, tc.asked)
			}
		})
	}
}

func keyOf(req *inference.Request) (Key, error) {
	return KeyOf([]byte(req.Model), []byte(req.Messages[0].Content), []byte(req.Sample)), nil
}

func req(content, sample string) *inference.Request {
	return &inference.Request{Model: "m", Messages: []pipeline.Message{{Role: "user", Content: content}}, Sample: sample}
}

func TestClientHitsAfterMiss(t *testing.T) {
	dir := t.TempDir()
	store, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	inner := &counting{}
	c := New(inner, store, keyOf, nil)
	first, err := c.Complete(context.Background(), req("a", "s0"))
	if err != nil {
		t.Fatal(err)
	}
	// Another sample of the same body is another entry.
	if _, err := c.Complete(context.Background(), req("a", "s1")); err != nil {
		t.Fatal(err)
	}
	// A new store over the directory (the next run) answers without asking.
	store2, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	c2 := New(inner, store2, keyOf, nil)
	again, err := c2.Complete(context.Background(), req("a", "s0"))
	if err != nil {
		t.Fatal(err)
	}
	if inner.n.Load() != 2 {
		t.Fatalf("inner asked %d times, want 2", inner.n.Load())
	}
	if fmt.Sprint(*again) != fmt.Sprint(*first) {
		t.Fatalf("cached %+v, want %+v", *again, *first)
	}
	if st := store2.Stats(); st.Hits != 1 || st.Misses != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st := store.Stats(); st.Hits != 0 || st.Misses != 2 {
		t.Fatalf("first stats %+v", st)
	}
	// Errors are not stored.
	if _, err := c2.Complete(context.Background(), req("fail", "s0")); err == nil {
		t.Fatal("want error")
	}
	if _, err := c2.Complete(context.Background(), req("fail", "s0")); err == nil {
		t.Fatal("want error")
	}
	if inner.n.Load() != 4 {
		t.Fatalf("inner asked %d times, want 4 (errors are asked again)", inner.n.Load())
	}
}

func TestCorruptEntryIsMiss(t *testing.T) {
	dir := t.TempDir()
	store, _ := Open(dir, 0)
	k := KeyOf([]byte("x"))
	if err := store.Put(k, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, rel(k))
	data, _ := os.ReadFile(path)
	for name, bad := range map[string][]byte{
		"torn":      data[:len(data)-3],
		"flipped":   append(append([]byte{}, data[:len(data)-2]...), 'X', data[len(data)-1]),
		"no header": []byte(`{"a": 1}`),
		"empty":     nil,
	} {
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		var v map[string]int
		if store.Get(k, &v) {
			t.Errorf("%s: a corrupted entry was a hit: %v", name, v)
		}
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var v map[string]int
	if !store.Get(k, &v) || v["a"] != 1 {
		t.Fatalf("whole entry: %v", v)
	}
}

func TestEvictsOldestFirst(t *testing.T) {
	dir := t.TempDir()
	store, _ := Open(dir, 0)
	payload := make([]byte, 1000)
	var keys []Key
	for i := range 5 {
		k := KeyOf([]byte{byte(i)})
		keys = append(keys, k)
		if err := store.Put(k, payload); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(time.Duration(i-10) * time.Minute)
		os.Chtimes(filepath.Join(dir, rel(k)), old, old)
	}
	size := store.Stats().Bytes / 5
	// Reopened with room for three entries: the two oldest go.
	store, err := Open(dir, 3*size+size/2)
	if err != nil {
		t.Fatal(err)
	}
	var v []byte
	for i, k := range keys {
		if got, want := store.Get(k, &v), i >= 2; got != want {
			t.Errorf("entry %d present %v, want %v", i, got, want)
		}
	}
	// A hit refreshed entries 2..4; entry 2 is now the oldest but a new
	// put evicts the least recently used.
	os.Chtimes(filepath.Join(dir, rel(keys[3])), time.Now().Add(-time.Hour), time.Now().Add(-time.Hour))
	store, _ = Open(dir, 3*size+size/2)
	if err := store.Put(KeyOf([]byte("new")), payload); err != nil {
		t.Fatal(err)
	}
	if store.Get(keys[3], &v) {
		t.Error("the least recently used entry survived")
	}
	if !store.Get(keys[2], &v) || !store.Get(keys[4], &v) {
		t.Error("a recent entry was evicted")
	}
	if st := store.Stats(); st.Bytes > 3*size+size/2 || st.Evicted != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestConcurrentWritersNeverTear(t *testing.T) {
	dir := t.TempDir()
	k := KeyOf([]byte("same"))
	var wg sync.WaitGroup
	big := make([]int, 20000)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(dir, 0)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range 20 {
				_ = s.Put(k, big)
				var v []int
				if s.Get(k, &v) && len(v) != len(big) {
					t.Errorf("writer %d round %d: torn read of %d ints", w, i, len(v))
				}
			}
		}()
	}
	wg.Wait()
	tmps, _ := filepath.Glob(filepath.Join(dir, "*", tmpPrefix+"*"))
	if len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

func TestOpenRemovesStaleTemporaries(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "ab"), 0o755)
	stale := filepath.Join(dir, "ab", tmpPrefix+"dead")
	fresh := filepath.Join(dir, "ab", tmpPrefix+"live")
	os.WriteFile(stale, []byte("half"), 0o644)
	os.WriteFile(fresh, []byte("half"), 0o644)
	old := time.Now().Add(-2 * staleTmp)
	os.Chtimes(stale, old, old)
	s, err := Open(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Error("a crashed writer's temporary file survived")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a concurrent writer's temporary file was removed")
	}
	if s.Stats().Bytes != 0 {
		t.Errorf("temporaries counted as entries: %+v", s.Stats())
	}
}

func TestKeyOfIsUnambiguous(t *testing.T) {
	if KeyOf([]byte("ab"), []byte("c")) == KeyOf([]byte("a"), []byte("bc")) {
		t.Fatal("parts are not delimited")
	}
}
