package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// With ProfileEnv set, profile writes a CPU profile named by the process
// and its pid into the folder.
func TestProfile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ProfileEnv, dir)
	profile("bench")()
	st, err := os.Stat(filepath.Join(dir, fmt.Sprintf("bench-%d.pprof", os.Getpid())))
	if err != nil || st.Size() == 0 {
		t.Fatalf("the profile: %v (%v)", st, err)
	}
}
