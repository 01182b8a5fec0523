package sluice_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
)

func TestKeyIsInjective(t *testing.T) {
	lists := [][]string{
		{"user", "alex", "trade"},
		{"user", "alex:trade"},
		{"user:alex", "trade"},
		{"user", "{alex}", "trade"},
		{"user", "%7Balex%7D", "trade"},
		{"user", "alex#0"},
		{"user", "alex", ""},
		{"user", "alex"},
		{"user", "alex%3Atrade"},
	}
	seen := map[string][]string{}
	for _, parts := range lists {
		k := sluice.Key(parts...)
		if prev, dup := seen[k]; dup {
			t.Errorf("Key(%q) = Key(%q) = %q", parts, prev, k)
		}
		seen[k] = parts
	}
	if got := sluice.Key("user", "{alex}:x#1%"); got != "user:%7Balex%7D%3Ax%231%25" {
		t.Errorf("Key escaped to %q", got)
	}
	if s := "plain-id_42"; sluice.Escape(s) != s {
		t.Errorf("Escape changed %q", s)
	}
}

func TestCellRounding(t *testing.T) {
	for _, c := range []struct {
		r    algo.Result
		want [5]int64
	}{
		{algo.Result{Allowed: true, Quota: 16, Remaining: 15, ResetAfter: 2 * time.Second}, [5]int64{0, 16, 15, -1, 2}},
		{algo.Result{Allowed: false, Quota: 16, RetryAfter: 2*time.Second + 999*time.Microsecond, ResetAfter: 31*time.Second + time.Millisecond}, [5]int64{1, 16, 0, 2, 32}},
		{algo.Result{Allowed: false, Quota: 16, RetryAfter: algo.Never, ResetAfter: 0}, [5]int64{1, 16, 0, -1, 0}},
		{algo.Result{Allowed: false, Quota: 1, RetryAfter: 1500 * time.Millisecond, ResetAfter: 1500 * time.Millisecond}, [5]int64{1, 1, 0, 2, 2}},
	} {
		if got := sluice.Cell(c.r); got != c.want {
			t.Errorf("Cell(%+v) = %v, want %v", c.r, got, c.want)
		}
	}
}

func TestValidateAll(t *testing.T) {
	lim := algo.Gate{Interval: time.Second}
	t0 := time.Unix(1800000000, 0)
	reqs := []sluice.Request{{Key: "a", Limit: lim, Time: t0}, {Key: "b", Limit: lim, Time: t0.Add(time.Second)}}
	if err := sluice.ValidateAll(reqs, make([]algo.Result, 2)); err == nil {
		t.Error("requests with different times were accepted")
	}
	reqs[1].Time = t0
	if err := sluice.ValidateAll(reqs, make([]algo.Result, 1)); err == nil {
		t.Error("too few results were accepted")
	}
	if err := sluice.ValidateAll(reqs, make([]algo.Result, 2)); err != nil {
		t.Error(err)
	}
	if err := sluice.ValidateAll(nil, nil); err == nil {
		t.Error("an empty batch was accepted")
	}
}

func TestSummarize(t *testing.T) {
	s := time.Second
	levels := []sluice.Level{
		{Key: "user:alex", Result: algo.Result{Allowed: true, Quota: 16, Remaining: 9, ResetAfter: 14 * s}},
		{Key: "user:alex:trade", Result: algo.Result{Allowed: false, Quota: 6, Remaining: 0, RetryAfter: 3 * s, ResetAfter: 15 * s}},
		{Key: "user:alex:eu", Result: algo.Result{Allowed: false, Quota: 3, Remaining: 1, RetryAfter: 7 * s, ResetAfter: 8 * s}},
		{Key: "shadow", Shadow: true, Result: algo.Result{Allowed: false, Quota: 1, Remaining: 0, RetryAfter: algo.Never, ResetAfter: time.Hour}},
	}
	// Denied: the summary is the level that holds the request back
	// longest (eu, 7s), not the one with the least remaining (trade).
	levels[2].Result.DeniedBy = 2
	want := algo.Result{Allowed: false, Quota: 3, Remaining: 1, RetryAfter: 7 * s, ResetAfter: 15 * s, DeniedBy: 2}
	if got := sluice.Summarize(levels); got != want {
		t.Fatalf("Summarize = %+v, want %+v", got, want)
	}
	// Allowed: the level with the least remaining.
	allowed := []sluice.Level{levels[0], {Result: algo.Result{Allowed: true, Quota: 6, Remaining: 2, ResetAfter: s}}}
	if got := sluice.Summarize(allowed); got != (algo.Result{Allowed: true, Quota: 6, Remaining: 2, ResetAfter: 14 * s}) {
		t.Fatalf("allowed summary = %+v", got)
	}
	levels[2].Result.RetryAfter = algo.Never
	if got := sluice.Summarize(levels); got.RetryAfter != algo.Never {
		t.Fatalf("Never did not win: %+v", got)
	}
	if got := sluice.Summarize(levels[3:]); got != (algo.Result{Allowed: true}) {
		t.Fatalf("shadow-only summary = %+v, want allowed and empty", got)
	}
}
