package redis

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

func TestReset(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.URL(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lim := algo.FixedWindow{Count: 2, Window: time.Hour}
	reqs := []store.Request{
		{Key: "user:alex", Tag: "user:alex", Plan: algo.MustCompile(lim), Cost: 2},
		{Key: "user:alex:trade", Tag: "user:alex", Plan: algo.MustCompile(lim), Cost: 2},
	}
	res := make([]algo.Result, 2)
	if ok, err := s.DecideAll(ctx, reqs, res); err != nil || !ok {
		t.Fatalf("first: %v %v", ok, err)
	}
	if v, _ := srv.Do("EXISTS", StateKey(DefaultPrefix, reqs[1])); v != "1" {
		t.Fatalf("state key missing: %q", v)
	}
	if err := s.Reset(ctx, append(reqs, store.Request{Key: "never-seen"})); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{StateKey(DefaultPrefix, reqs[0]), StateKey(DefaultPrefix, reqs[1])} {
		if v, _ := srv.Do("EXISTS", k); v != "0" {
			t.Errorf("%s still exists after reset", k)
		}
	}
	if ok, err := s.DecideAll(ctx, reqs, res); err != nil || !ok {
		t.Fatalf("after reset: %v %v", ok, err)
	}
}
