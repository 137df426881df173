package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/trajflow/trajflow/config"
)

// TestServeAddr: serve.addr takes IPv6 addresses in brackets, from YAML
// (quoted, as YAML wants a value starting with [) and from a flag of its
// own (SetByFlag, as typed); [::1] is loopback and needs no token; an
// error names the flag that set the key.
func TestServeAddr(t *testing.T) {
	const base = "source: {path: x.jsonl}\n"
	for _, tc := range []struct {
		name, yaml, flag string
		needsToken       bool
		wantErr          string
	}{
		{"yaml ipv6 loopback", `serve: {addr: "[::1]:8712"}`, "", false, ""},
		{"yaml ipv4 loopback", `serve: {addr: "127.0.0.1:8712"}`, "", false, ""},
		{"yaml localhost", `serve: {addr: "localhost:8712"}`, "", false, ""},
		{"yaml ipv6 any", `serve: {addr: "[::]:8712"}`, "", true, ""},
		{"flag ipv6 loopback", "", "[::1]:8712", false, ""},
		{"flag ipv6 other", "", "[2001:db8::1]:8712", true, ""},
		{"flag over yaml", `serve: {addr: "0.0.0.0:1"}`, "[::1]:0", false, ""},
		{"bad flag", "", "nowhere", false, "--addr nowhere: serve.addr"},
		{"bad yaml", `serve: {addr: "nowhere"}`, "", false, "line 2: serve.addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Decode([]byte(base+tc.yaml), "cfg.yaml", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.flag != "" {
				if err := cfg.SetByFlag("serve.addr", tc.flag, "--addr"); err != nil {
					t.Fatal(err)
				}
			}
			err = cfg.Locate(cfg.Validate())
			switch {
			case tc.wantErr != "":
				var invalid *config.ValidationError
				if !errors.As(err, &invalid) || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "--set") {
					t.Fatalf("%v, want an error naming %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case cfg.Serve.NeedsToken() != tc.needsToken:
				t.Fatalf("%s: needs a token %v, want %v", cfg.Serve.Addr, !tc.needsToken, tc.needsToken)
			}
		})
	}
	cfg, _ := config.Decode([]byte(base), "cfg.yaml", nil)
	if err := cfg.SetByFlag("serve.lease", "1s", "--lease"); err == nil || !strings.Contains(err.Error(), "serve.lease") {
		t.Fatalf("a key no flag sets: %v", err)
	}
}
