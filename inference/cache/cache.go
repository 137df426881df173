// Package cache is the response cache across runs (generate.cache): an
// inference client that answers a request from a directory of earlier
// responses, keyed by a hash of exactly what the request sends, and asks
// the client it wraps otherwise.
//
// Entries are files DIR/ab/abcdef… (the key's hex), each written to a
// temporary file, synced and renamed into place, so a reader never sees a
// torn entry, under concurrent runs or after a kill -9. An entry whose
// checksum does not match is a miss (and is replaced). The directory is
// bounded by a byte budget: when a write takes it over, the entries used
// least recently (oldest modification time; a hit refreshes it) go first.
package cache

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trajflow/trajflow/inference"
	"github.com/trajflow/trajflow/internal/durable"
)

// Key is the hash an entry is stored under.
type Key [sha256.Size]byte

func (k Key) String() string { return hex.EncodeToString(k[:]) }

// KeyOf hashes parts, each length-prefixed, so no two different lists of
// parts have the same key.
func KeyOf(parts ...[]byte) Key {
	h := sha256.New()
	h.Write([]byte("trajflow-cache-v1\x00"))
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var k Key
	h.Sum(k[:0])
	return k
}

// header starts every entry file: the magic, then the payload's SHA-256
// and length on the first line.
const header = "trajflow-cache 1"

// tmpPrefix names entries being written; a crashed writer's are removed
// once they are older than staleTmp.
const (
	tmpPrefix = ".tmp-"
	staleTmp  = time.Hour
)

// Stats are a store's counters.
type Stats struct {
	Hits, Misses int64
	// HitPromptTokens, HitCachedPromptTokens and HitCompletionTokens are
	// the tokens of the answers given from the store (their usage, the
	// structured-output check's discarded tries included): what the hits
	// would have cost had they been sent.
	HitPromptTokens, HitCachedPromptTokens, HitCompletionTokens int64
	// Bytes is the size of the entries the store knows of.
	Bytes int64
	// Evicted counts entries removed to stay under the budget.
	Evicted int64
}

// Store is a cache directory. It is safe for concurrent use, and several
// processes may share a directory.
type Store struct {
	dir string
	max int64 // 0: unbounded

	mu      sync.Mutex
	entries map[string]*entry // by relative path
	bytes   int64
	evicted int64

	hits, misses atomic.Int64

	hitPrompt, hitCached, hitCompletion atomic.Int64
}

type entry struct {
	path string
	size int64
	used time.Time
}

// Open opens (creating) the cache directory dir, bounded to maxBytes of
// entries (0: unbounded). It removes what crashed writers left behind and,
// when the directory is over the budget, the oldest entries.
func Open(dir string, maxBytes int64) (*Store, error) {
	if maxBytes < 0 {
		return nil, fmt.Errorf("cache: max bytes must be >= 0, got %d", maxBytes)
	}
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	s := &Store{dir: dir, max: maxBytes, entries: map[string]*entry{}}
	now := time.Now()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed by another run meanwhile
			}
			return err
		}
		if d.IsDir() {
			// A run killed between an entry's rename and its directory's
			// sync (or a directory's creation and its parent's sync) left
			// names this run may be answered from, and commit rows on, that
			// a power cut would take back: make them durable once, now.
			if err := durable.SyncDir(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			if now.Sub(info.ModTime()) > staleTmp {
				_ = os.Remove(path)
			}
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		s.entries[rel] = &entry{path: rel, size: info.Size(), used: info.ModTime()}
		s.bytes += info.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	s.mu.Lock()
	s.evictLocked()
	s.mu.Unlock()
	return s, nil
}

// Dir is the cache directory.
func (s *Store) Dir() string { return s.dir }

// Stats returns the store's counters now.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Hits: s.hits.Load(), Misses: s.misses.Load(), Bytes: s.bytes, Evicted: s.evicted,
		HitPromptTokens: s.hitPrompt.Load(), HitCachedPromptTokens: s.hitCached.Load(), HitCompletionTokens: s.hitCompletion.Load()}
}

func rel(k Key) string {
	h := k.String()
	return filepath.Join(h[:2], h)
}

// Get reads the entry of k into v. A missing, torn or corrupted entry is
// a miss (false); Get counts hits and misses.
func (s *Store) Get(k Key, v any) bool {
	r := rel(k)
	data, err := os.ReadFile(filepath.Join(s.dir, r))
	if err == nil {
		var payload []byte
		payload, err = verify(data)
		if err == nil {
			err = json.Unmarshal(payload, v)
		}
	}
	if err != nil {
		s.misses.Add(1)
		return false
	}
	s.hits.Add(1)
	now := time.Now()
	_ = os.Chtimes(filepath.Join(s.dir, r), now, now)
	s.mu.Lock()
	if e := s.entries[r]; e != nil {
		e.used = now
	}
	s.mu.Unlock()
	return true
}

// verify checks an entry file's header and returns its payload.
func verify(data []byte) ([]byte, error) {
	line, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok {
		return nil, errors.New("no header")
	}
	f := strings.Fields(string(line))
	if len(f) != 4 || f[0]+" "+f[1] != header {
		return nil, errors.New("bad header")
	}
	var n int
	if _, err := fmt.Sscan(f[3], &n); err != nil || n != len(rest) {
		return nil, errors.New("bad length")
	}
	sum := sha256.Sum256(rest)
	if hex.EncodeToString(sum[:]) != f[2] {
		return nil, errors.New("bad checksum")
	}
	return rest, nil
}

// Put stores v as the entry of k: a temporary file, synced, renamed into
// place, the directory synced (durable.File; a concurrent writer of the
// same key writes the same bytes, and the last rename wins whole).
func (s *Store) Put(k Key, v any) error {
	// Marshal would escape <, > and & in a reply's raw body: the encoder
	// keeps them as the server sent them.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	payload := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	sum := sha256.Sum256(payload)
	r := rel(k)
	final := filepath.Join(s.dir, r)
	if err := durable.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(final), tmpPrefix+hex.EncodeToString(rnd[:]))
	f, err := durable.CreateAs(tmp, final, 0o644)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "%s %s %d\n", header, hex.EncodeToString(sum[:]), len(payload))
	_, err = w.Write(payload)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return errors.Join(fmt.Errorf("cache: write %s: %w", tmp, err), f.Abort())
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	size := int64(len(header) + len(payload) + 2 + 64 + len(fmt.Sprint(len(payload))) + 1)
	if info, err := os.Stat(final); err == nil {
		size = info.Size()
	}
	s.mu.Lock()
	if e := s.entries[r]; e != nil {
		s.bytes -= e.size
	}
	s.entries[r] = &entry{path: r, size: size, used: time.Now()}
	s.bytes += size
	s.evictLocked()
	s.mu.Unlock()
	return nil
}

// evictLocked removes the least recently used entries until the store is
// within its budget.
func (s *Store) evictLocked() {
	if s.max <= 0 || s.bytes <= s.max {
		return
	}
	all := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		all = append(all, e)
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].used.Equal(all[j].used) {
			return all[i].used.Before(all[j].used)
		}
		return all[i].path < all[j].path
	})
	for _, e := range all {
		if s.bytes <= s.max {
			break
		}
		if err := os.Remove(filepath.Join(s.dir, e.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		delete(s.entries, e.path)
		s.bytes -= e.size
		s.evicted++
	}
}

// KeyFunc turns a request into the bytes it sends (the body, and whatever
// else decides the reply: the model, the endpoint's API, the sample).
type KeyFunc func(req *inference.Request) (Key, error)

// Client answers from the store, and asks inner on a miss (storing what
// it answers). Errors are not stored.
type Client struct {
	inner inference.Client
	store *Store
	key   KeyFunc
	// OnPutError, when set, hears of entries that could not be stored (the
	// run goes on without them).
	OnPutError func(error)
}

// New wraps inner with the store. The result keeps inner's Tokenize.
func New(inner inference.Client, store *Store, key KeyFunc, onPutError func(error)) inference.Client {
	return inference.Decorate(&Client{inner: inner, store: store, key: key, OnPutError: onPutError}, inner)
}

// Complete implements inference.Client.
func (c *Client) Complete(ctx context.Context, req *inference.Request) (*inference.Response, error) {
	k, err := c.key(req)
	if err != nil {
		return nil, err
	}
	var cached inference.Response
	if c.store.Get(k, &cached) {
		// A nil Extra or Raw is stored as null.
		if string(cached.Extra) == "null" {
			cached.Extra = nil
		}
		if string(cached.Raw) == "null" {
			cached.Raw = nil
		}
		c.store.hitPrompt.Add(int64(cached.PromptTokens + cached.Discarded.PromptTokens))
		c.store.hitCached.Add(int64(cached.CachedPromptTokens))
		c.store.hitCompletion.Add(int64(cached.CompletionTokens + cached.Discarded.CompletionTokens))
		return &cached, nil
	}
	resp, err := c.inner.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	if resp.FinishReason == inference.FinishAbort {
		// A partial output a pause cut short (the caller continues it)
		// is not the request's answer.
		return resp, nil
	}
	if perr := c.store.Put(k, resp); perr != nil && c.OnPutError != nil {
		c.OnPutError(perr)
	}
	return resp, nil
}
