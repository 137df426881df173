package crashfs_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/trajflow/trajflow/internal/crashfs"
)

// A file written and renamed into place without an fsync: after the
// power cut its name is there (the directory was synced) and its data is
// not. (Not run by go test: it needs FUSE; TestCut runs the same.)
func ExampleFS_Cut() {
	dir, _ := os.MkdirTemp("", "crashfs")
	defer os.RemoveAll(dir)
	fsys, err := crashfs.Mount(dir)
	if err != nil {
		fmt.Println(err) // wraps crashfs.ErrUnavailable without FUSE
		return
	}
	defer fsys.Close()
	root := fsys.Root()
	_ = os.WriteFile(filepath.Join(root, ".state.tmp"), []byte("v1"), 0o644)
	_ = os.Rename(filepath.Join(root, ".state.tmp"), filepath.Join(root, "state"))
	d, _ := os.Open(root)
	_ = d.Sync() // the rename is durable, the file's data is not
	_ = d.Close()
	if err := fsys.Cut(); err != nil {
		fmt.Println(err)
		return
	}
	b, err := os.ReadFile(filepath.Join(root, "state"))
	fmt.Printf("%q %v\n", b, err)
	// Prints: "" <nil>
}
