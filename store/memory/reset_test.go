package memory

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/store"
)

func TestReset(t *testing.T) {
	s := New()
	defer s.Close()
	ctx := context.Background()
	lim := algo.FixedWindow{Count: 2, Window: algo.MaxHorizon}
	req := store.Request{Key: "a", Plan: algo.MustCompile(lim), Cost: 2}
	if r, _ := s.Decide(ctx, req); !r.Allowed {
		t.Fatal("first decision denied")
	}
	if r, _ := s.Decide(ctx, req); r.Allowed {
		t.Fatal("second decision allowed")
	}
	if err := s.Reset(ctx, []store.Request{{Key: "a"}, {Key: "never-seen"}}); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Decide(ctx, req); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after reset: %+v", r)
	}
	if s.Len() != 1 {
		t.Errorf("Len %d", s.Len())
	}
}
