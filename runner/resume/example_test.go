//go:build unix

package resume_test

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/trajflow/trajflow/runner/resume"
)

// The output directory's lock keeps a second run out until released.
func ExampleLockDir() {
	dir, _ := os.MkdirTemp("", "example-lock-")
	defer os.RemoveAll(dir)
	release, err := resume.LockDir(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = resume.LockDir(dir)
	fmt.Println(err != nil && strings.Contains(err.Error(), "in use by another trajflow run"))
	fmt.Println(errors.Join(release()))
	// Output:
	// true
	// <nil>
}
