package redis

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

func plan(t *testing.T, l algo.Limit) *algo.Plan {
	t.Helper()
	p, err := algo.Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

var t0 = time.Unix(1_800_000_000, 0)

func at(d time.Duration) cacheTime { return cacheNow(t0.Add(d)) }

func TestDenialCacheLookup(t *testing.T) {
	c := newDenialCache(100)
	p := plan(t, algo.GCRA{Burst: 2, Count: 1, Period: time.Second})
	denial := algo.Result{Quota: 3, RetryAfter: 400 * time.Millisecond, ResetAfter: 2 * time.Second}
	c.Remember("k", p, 2, at(0), c.Epoch(), denial)
	for _, tc := range []struct {
		name string
		key  string
		p    *algo.Plan
		cost int64
		now  cacheTime
		hit  bool
	}{
		{"same cost, later", "k", p, 2, at(100 * time.Millisecond), true},
		{"larger cost", "k", p, 3, at(0), true},
		{"smaller cost", "k", p, 1, at(0), false},
		{"a peek", "k", p, 0, at(0), false},
		{"at expiry", "k", p, 2, at(400 * time.Millisecond), false},
		{"before the denial", "k", p, 2, at(-time.Microsecond), false},
		{"another key", "k2", p, 2, at(0), false},
		{"another limit", "k", plan(t, algo.GCRA{Burst: 3, Count: 1, Period: time.Second}), 2, at(0), false},
		{"the store's clock", "k", p, 2, cacheNow(time.Time{}), false},
	} {
		res, hit := c.Lookup(tc.key, tc.p, tc.cost, tc.now)
		if hit {
			c.Answered()
		}
		if hit != tc.hit {
			t.Errorf("%s: hit %v, want %v", tc.name, hit, tc.hit)
		}
		if tc.name == "same cost, later" {
			want := algo.Result{Quota: 3, RetryAfter: 300 * time.Millisecond, ResetAfter: 1900 * time.Millisecond}
			if res != want {
				t.Errorf("aged result %+v, want %+v", res, want)
			}
		}
	}
	if s := c.Stats(); s.Hits != 2 || s.Entries != 1 {
		t.Errorf("stats %+v, want 2 hits, 1 entry", s)
	}
	c.Admitted("k")
	if _, hit := c.Lookup("k", p, 2, at(0)); hit || c.Stats().Entries != 0 {
		t.Error("an admission did not drop the denial")
	}
}

// TestDenialCacheNotRemembered: allowed results, Never, peeks and limits whose
// denials record are not cached, nor a denial read before a Forget.
func TestDenialCacheNotRemembered(t *testing.T) {
	c := newDenialCache(100)
	g := plan(t, algo.GCRA{Burst: 2, Count: 1, Period: time.Second})
	uniform := plan(t, algo.SlidingLog{Limits: []algo.Window{{Count: 2, Window: time.Second}}, Mode: algo.Uniform})
	deny := algo.Result{RetryAfter: time.Second}
	c.Remember("allowed", g, 1, at(0), c.Epoch(), algo.Result{Allowed: true})
	c.Remember("never", g, 9, at(0), c.Epoch(), algo.Result{RetryAfter: algo.Never})
	c.Remember("peek", g, 0, at(0), c.Epoch(), deny)
	c.Remember("uniform", uniform, 1, at(0), c.Epoch(), deny)
	epoch := c.Epoch()
	c.Forget("other")
	c.Remember("stale", g, 1, at(0), epoch, deny)
	if n := c.Stats().Entries; n != 0 {
		t.Fatalf("%d entries remembered", n)
	}
	c.Remember("k", g, 1, at(0), c.Epoch(), deny)
	c.Clear()
	if _, hit := c.Lookup("k", g, 1, at(0)); hit || c.Stats().Entries != 0 {
		t.Error("Clear kept a denial")
	}
}

// TestDenialCacheBounded: the cache never holds much more than its size.
func TestDenialCacheBounded(t *testing.T) {
	c := newDenialCache(640)
	g := plan(t, algo.GCRA{Burst: 2, Count: 1, Period: time.Second})
	for i := range 100_000 {
		c.Remember(fmt.Sprint("k", i), g, 1, at(time.Duration(i)*time.Microsecond), c.Epoch(), algo.Result{RetryAfter: time.Hour})
	}
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].m)
	}
	if s := c.Stats(); n > 640 || s.Entries != int64(n) {
		t.Fatalf("%d entries held, %d counted; want at most 640", n, s.Entries)
	}
}
