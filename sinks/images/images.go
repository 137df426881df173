package images

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/trajflow/trajflow/internal/durable"
	"github.com/trajflow/trajflow/pipeline"
)

// Prefix starts a reference: "sha256:" and the hex SHA-256 of the bytes.
const Prefix = "sha256:"

// Store writes image bytes into one directory, each once.
type Store struct {
	dir  string
	mu   sync.Mutex
	have map[string]bool // hashes known to be on disk
	// dirSynced: the directory (and its parent) synced since an image
	// was first found there.
	dirSynced bool
}

// New returns a Store writing into dir (created on the first image).
func New(dir string) *Store { return &Store{dir: dir, have: map[string]bool{}} }

// Dir is the directory the Store writes into.
func (s *Store) Dir() string { return s.dir }

// FileName is the name a reference's bytes are stored under: HEX.EXT,
// EXT the media type's subtype ("png" for image/png).
func FileName(hash, mime string) string {
	ext := strings.TrimPrefix(mime, "image/")
	ext = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		if r >= 'A' && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return '_'
	}, ext)
	return hash + "." + ext
}

// Externalize replaces every data-URL image part of msgs by its reference,
// writing the bytes first. Parts are copied before they change (messages
// of one task share them).
func (s *Store) Externalize(msgs []pipeline.Message) error {
	for i := range msgs {
		m := &msgs[i]
		if !m.HasImages() {
			continue
		}
		copied := false
		for j, p := range m.Parts {
			if p.Type != pipeline.PartImage || !strings.HasPrefix(p.ImageURL, "data:") {
				continue
			}
			ref, err := s.Put(p.ImageURL)
			if err != nil {
				return err
			}
			if !copied {
				m.Parts, copied = slices.Clone(m.Parts), true
			}
			m.Parts[j].ImageURL = ref
		}
	}
	return nil
}

// Put stores a data URL's bytes (once) and returns its reference.
func (s *Store) Put(dataURL string) (string, error) {
	mime, data, err := pipeline.ParseDataURL(dataURL)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.have[hash] {
		return Prefix + hash, nil
	}
	path := filepath.Join(s.dir, FileName(hash, mime))
	if _, err := os.Stat(path); err != nil {
		if err := writeFile(s.dir, path, data); err != nil {
			return "", fmt.Errorf("output.images: %w", err)
		}
	} else if err := s.found(path); err != nil {
		return "", fmt.Errorf("output.images: %w", err)
	}
	s.have[hash] = true
	return Prefix + hash, nil
}

// found makes an image found on disk durable before a row references
// it: a run killed between an image's rename and its directory's sync
// left the name not yet durable, and a power cut after this run commits
// a row would keep the row and lose the image. The file is synced (its
// writer synced it before the rename; this costs nothing then), and the
// directory and its parent once per Store: no one else writes there
// without syncing them.
func (s *Store) found(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = durable.Sync(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || s.dirSynced {
		return err
	}
	if err := durable.SyncDir(s.dir); err != nil {
		return err
	}
	if err := durable.SyncDir(filepath.Dir(s.dir)); err != nil {
		return err
	}
	s.dirSynced = true
	return nil
}

// writeFile writes data to path durably (durable.WriteFile: a temporary
// file, synced, renamed, the directory synced), creating dir first.
func writeFile(dir, path string, data []byte) error {
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return durable.WriteFile(path, data, 0o644)
}

// Lookup returns the bytes and media subtype of a reference stored in
// dir.
func Lookup(dir, ref string) (data []byte, ext string, err error) {
	hash, ok := strings.CutPrefix(ref, Prefix)
	if !ok || len(hash) != 64 {
		return nil, "", fmt.Errorf("%q is not an image reference (want %sHEX)", ref, Prefix)
	}
	if _, err := hex.DecodeString(hash); err != nil {
		return nil, "", fmt.Errorf("%q is not an image reference: %w", ref, err)
	}
	matches, err := filepath.Glob(filepath.Join(dir, hash+".*"))
	if err != nil || len(matches) == 0 {
		return nil, "", fmt.Errorf("image %s: no file %s.* in %s", ref, hash, dir)
	}
	data, err = os.ReadFile(matches[0])
	return data, strings.TrimPrefix(filepath.Ext(matches[0]), "."), err
}

// CopyDir copies the images stored in src into dst, each durably and
// once: a file already in dst (the same name, so the same bytes) is left
// as it is. Files that are not stored images (HEX.EXT) are not copied. A
// file whose bytes do not hash to its name is an error naming it. A
// missing src holds no images.
func CopyDir(src, dst string) (copied, had int, err error) {
	entries, err := os.ReadDir(src)
	if os.IsNotExist(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range entries {
		hash, _, ok := strings.Cut(e.Name(), ".")
		if !ok || len(hash) != 64 || !e.Type().IsRegular() {
			continue
		}
		if _, err := hex.DecodeString(hash); err != nil {
			continue
		}
		path := filepath.Join(dst, e.Name())
		if _, err := os.Stat(path); err == nil {
			had++
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return copied, had, err
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hash {
			return copied, had, fmt.Errorf("image %s: its bytes do not hash to its name", filepath.Join(src, e.Name()))
		}
		if err := writeFile(dst, path, data); err != nil {
			return copied, had, err
		}
		copied++
	}
	return copied, had, nil
}
