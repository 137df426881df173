package openai

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/trajflow/trajflow/internal/crashfs"
	"github.com/trajflow/trajflow/internal/crashfs/crashfstest"
)

// An fsync of the Batch API's state file that failed is not retried: the
// append fails, and every later append returns the same error without
// writing or syncing (before, the next append synced the same descriptor
// again, which Linux reports successful after dropping the lines: a
// batch recorded as created could be gone after a power cut, and a
// resume would create it again).
func TestBatchStateFailedSyncIsNotRetried(t *testing.T) {
	fsys := crashfstest.Mount(t)
	s, _, err := openState(filepath.Join(fsys.Root(), "batches.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if err := s.append(stateEvent{Op: "plan", Key: "a", IDs: []string{"1"}}); err != nil {
		t.Fatal(err)
	}
	fsys.Inject(crashfs.Fault{Op: crashfs.Fsync, Err: syscall.EIO, Match: "batches.jsonl", Count: 1})
	if err := s.append(stateEvent{Op: "file", Key: "a", File: "f"}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("append: %v, want EIO", err)
	}
	if err := s.append(stateEvent{Op: "batch", Key: "a", Batch: "b"}); !errors.Is(err, syscall.EIO) {
		t.Errorf("the append after: %v, want the EIO again", err)
	}
	if st := fsys.Stats(); st.RetriedSyncs != 0 {
		t.Errorf("%d fsyncs retried on the descriptor whose fsync failed", st.RetriedSyncs)
	}
}
