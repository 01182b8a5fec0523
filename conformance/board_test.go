package conformance_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store"
)

// TestBoard: a board's entries and generation, alike on both stores.
func TestBoard(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			b := st.(store.Board)
			s0, err := b.Read(ctx, true)
			if err != nil || len(s0.Entries) != 0 || s0.Time.IsZero() {
				t.Fatalf("an empty board: %+v %v", s0, err)
			}
			if err := b.Post(ctx, "a", []byte("1")); err != nil {
				t.Fatal(err)
			}
			b.Post(ctx, "b", []byte("2"))
			b.Post(ctx, "a", []byte("3"))
			s1, _ := b.Read(ctx, true)
			if s1.Gen != s0.Gen+3 || len(s1.Entries) != 2 || string(s1.Entries["a"]) != "3" || string(s1.Entries["b"]) != "2" {
				t.Fatalf("after three posts: %+v", s1)
			}
			b.Post(ctx, "a", nil)
			s2, _ := b.Read(ctx, false)
			if s2.Gen != s1.Gen+1 || s2.Entries != nil {
				t.Fatalf("after a removal, read without entries: %+v", s2)
			}
			if s3, _ := b.Read(ctx, true); len(s3.Entries) != 1 {
				t.Fatalf("after a removal: %+v", s3)
			}
			for _, bad := range []struct {
				name  string
				value []byte
			}{{"", []byte("x")}, {strings.Repeat("n", store.MaxBoardName+1), []byte("x")}, {"big", make([]byte, store.MaxBoardValue+1)}} {
				if err := b.Post(ctx, bad.name, bad.value); err == nil {
					t.Errorf("a post of %d and %d bytes was taken", len(bad.name), len(bad.value))
				}
			}
		})
	}
}
