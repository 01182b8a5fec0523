package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
