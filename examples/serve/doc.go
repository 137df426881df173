// Package serveexample holds the tests of the serve examples' Python
// client (client.py): TestPythonClient runs test_client.py, its unit
// tests on Python's standard library, so that `go test ./...` checks the
// client's retries wherever python3 is installed. The examples
// themselves are Python (docs/serve.md).
package serveexample
