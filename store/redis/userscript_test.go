package redis_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store/redis"
)

// scriptFile writes a Lua script to a temporary file.
func scriptFile(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadScriptErrors: a script that does not load is a start-up error
// naming the file and carrying Redis's message.
func TestLoadScriptErrors(t *testing.T) {
	srv := redistest.Start(t)
	st := open(t, srv, redis.Options{})
	ctx := context.Background()

	bad := scriptFile(t, "broken.lua", "local x = \nreturn {")
	_, err := st.LoadScript(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "Error compiling script") {
		t.Errorf("syntax error: %v", err)
	}
	if _, ok := rueidis.IsRedisErr(errors.Unwrap(err)); !ok {
		t.Errorf("syntax error does not wrap Redis's error: %v", err)
	}

	missing := filepath.Join(t.TempDir(), "missing.lua")
	if _, err := st.LoadScript(ctx, missing); err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}

	if _, err := st.LoadScript(ctx, scriptFile(t, "ok.lua", `return {"allow", {}}`)); err != nil {
		t.Errorf("a good script: %v", err)
	}
}

// TestExamplesLoad: every shipped example script loads and answers by
// the contract.
func TestExamplesLoad(t *testing.T) {
	st := open(t, redistest.Start(t), redis.Options{})
	files, err := filepath.Glob("examples/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		s, err := st.LoadScript(context.Background(), f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		args := map[string][]string{
			"window_from_first.lua": {"3", "60"},      // limit, window
			"token_bucket.lua":      {"3", "1", "60"}, // burst, rate, per
		}[s.Name()]
		if args == nil {
			t.Fatalf("%s: no arguments for this example in the test", f)
		}
		rep, err := s.Run(context.Background(), []string{"k:" + f}, args)
		if top, ok := rep.([]any); err != nil || !ok || len(top) != 2 || top[0] != "allow" {
			t.Errorf("%s: %#v, %v", f, rep, err)
		} else if items, ok := top[1].([]any); !ok || len(items) != 3 {
			t.Errorf("%s: %#v, want 3 header values", f, rep)
		}
	}
}
