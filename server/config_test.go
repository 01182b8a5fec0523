package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/yamlfile"
)

// TestConfigErrors: a sluice.yaml's problems are reported all at once, in
// the format of a limits.yaml's (file:line:col: field: message), not the
// YAML library's "[1:1] unknown field".
func TestConfigErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	src := "htp: 127.0.0.1:1\ntimeout: soon\nqueues:\n  jobs: {capacity: many}\nredis:\n  prefx: x\non_store_error: denyy\nshutdown_delay: 1 minute\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var c Config
	err := LoadConfigFile(path, &c)
	var list yamlfile.ErrorList
	if !errors.As(err, &list) || len(list) != 6 {
		t.Fatalf("errors: %v", err)
	}
	for i, want := range []string{
		path + `:1:1: htp: unknown field "htp" (want http, grpc,`,
		path + `:2:10: timeout: time: invalid duration "soon"`,
		path + `:4:20: queues.jobs.capacity: want an integer, got "many"`,
		path + `:6:3: redis.prefx: unknown field "prefx" (want prefix,`,
		path + `:7:17: on_store_error: want one of allow, deny, got "denyy" (did you mean deny?)`,
		path + `:8:17: shutdown_delay: time: unknown unit " minute" in duration "1 minute" (write 1m)`,
	} {
		if got := list[i].Error(); !strings.HasPrefix(got, want) {
			t.Errorf("error %d: %s\nwant it to start %s", i, got, want)
		}
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := LoadConfigFile(path, &c); err != nil {
		t.Errorf("an empty file: %v", err)
	}
}
