package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPollWaitsForTheFileToSettle: a policy file rewritten in place, its
// valid first half first, is not loaded until it has stayed the same for a
// poll: the half that leaves api/* unlimited is never in force.
func TestPollWaitsForTheFileToSettle(t *testing.T) {
	const first = "schema:\n  web: {limits: [1, 1, 1]}\n"
	const whole = first + "  api:\n    children:\n      \"*\": {limits: [5, 5, 1]}\n"
	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte(first+"  api:\n    children:\n      \"*\": {limits: [9, 9, 1]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Config{Store: "memory", Policy: path, WatchInterval: -1}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limited := func() bool { return len(s.current.Load().Match([]string{"api", "k"}).Hits) > 0 }
	write := func(data string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(data)
		f.Close()
	}
	write(first) // the writer has written half
	s.reloadIfChanged()
	if !limited() {
		t.Fatal("the half-written file was loaded at the first poll that saw it")
	}
	write(whole) // and then the rest
	s.reloadIfChanged()
	if !limited() {
		t.Fatal("the half-written file was loaded")
	}
	s.reloadIfChanged() // unchanged since the last poll: loaded
	if m := s.current.Load().Match([]string{"api", "k"}); len(m.Hits) != 1 || m.Hits[0].Limits[0] == nil {
		t.Fatalf("the whole file is not in force: %+v", m)
	}
	if s.fileState != statFile(path) {
		t.Error("the file loaded is not the one on disk")
	}
}

// TestReloadFailureNamesTheSource: a failed reload's log line names what
// was read, a policy file or envoyproxy/ratelimit's directory (it said
// file="" for a directory).
func TestReloadFailureNamesTheSource(t *testing.T) {
	dir := t.TempDir()
	policyFile := filepath.Join(dir, "limits.yaml")
	envoyDir := filepath.Join(dir, "envoy")
	if err := os.Mkdir(envoyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policyFile, []byte("schema:\n  web: {limits: [1, 1, 1]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	envoyFile := filepath.Join(envoyDir, "d.yaml")
	if err := os.WriteFile(envoyFile, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg        Config
		file, want string
	}{
		{Config{Store: "memory", Policy: policyFile, WatchInterval: -1}, policyFile, "file=" + policyFile},
		{Config{Store: "memory", EnvoyConfigDir: envoyDir, WatchInterval: -1}, envoyFile, "dir=" + envoyDir},
	} {
		var log bytes.Buffer
		s, err := New(context.Background(), c.cfg, slog.New(slog.NewTextHandler(&log, nil)))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := os.WriteFile(c.file, []byte("schema: [\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if s.reload("test") {
			t.Fatalf("%s: a bad file was loaded", c.file)
		}
		i := strings.Index(log.String(), "policy reload failed")
		if i < 0 {
			t.Fatalf("%s: no failed reload logged:\n%s", c.file, log.String())
		}
		line, _, _ := strings.Cut(log.String()[i:], "\n")
		if !strings.Contains(line, c.want+" ") {
			t.Errorf("the failed reload's line %q does not say %s", line, c.want)
		}
	}
}
