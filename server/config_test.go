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

// TestConfigValidateRefuses: every setting out of its range is refused
// with the setting's name (a negative shutdown_timeout or shutdown_delay
// was taken, and cut in-flight requests or the drain short).
func TestConfigValidateRefuses(t *testing.T) {
	for _, env := range []string{"SLUICE_TIMEOUT=-1s", "SLUICE_MAX_WAITING=-5", "SLUICE_MAX_WAITING=1000001", "SLUICE_REDIS_MAX_LEASE=-1",
		"SLUICE_CONSUMERS_TTL=-1s", "SLUICE_CONSUMERS_MAX=1001", "SLUICE_SHUTDOWN_TIMEOUT=-1s", "SLUICE_SHUTDOWN_DELAY=-1s",
		"SLUICE_HEADERS=fancy", "SLUICE_ON_STORE_ERROR=maybe", "SLUICE_GRPC_REFLECTION=yes",
		"SLUICE_REDIS_GLOBAL_ALLOWANCE=-1", "SLUICE_REDIS_HOME_REPLICAS=65", "SLUICE_REDIS_HOME=redis://home:6379"} {
		name, value, _ := strings.Cut(env, "=")
		var c Config
		if err := ApplyEnv(&c, func(k string) string { return map[string]string{name: value}[k] }); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		field := ""
		for _, v := range EnvVars {
			if v.Name == name {
				field = v.Field
			}
		}
		if field == "" {
			t.Fatalf("%s is not in EnvVars", name)
		}
		if err := c.Defaults().Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", env, err, field)
		}
	}
}
