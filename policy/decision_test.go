package policy

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/algo"
)

func TestSummarize(t *testing.T) {
	s := time.Second
	levels := []Level{
		{Key: "user:alex", Result: algo.Result{Allowed: true, Quota: 16, Remaining: 9, ResetAfter: 14 * s}},
		{Key: "user:alex:trade", Result: algo.Result{Allowed: false, Quota: 6, Remaining: 0, RetryAfter: 3 * s, ResetAfter: 15 * s}},
		{Key: "user:alex:eu", Result: algo.Result{Allowed: false, Quota: 3, Remaining: 1, RetryAfter: 7 * s, ResetAfter: 8 * s}},
		{Key: "shadow", Shadow: true, Result: algo.Result{Allowed: false, Quota: 1, Remaining: 0, RetryAfter: algo.Never, ResetAfter: time.Hour}},
	}
	// Denied: the summary is the level that holds the request back
	// longest (eu, 7s), not the one with the least remaining (trade).
	levels[2].Result.DeniedBy = 2
	want := algo.Result{Allowed: false, Quota: 3, Remaining: 1, RetryAfter: 7 * s, ResetAfter: 15 * s, DeniedBy: 2}
	if got := Summarize(levels); got != want {
		t.Fatalf("Summarize = %+v, want %+v", got, want)
	}
	// Allowed: the level with the least remaining.
	allowed := []Level{levels[0], {Result: algo.Result{Allowed: true, Quota: 6, Remaining: 2, ResetAfter: s}}}
	if got := Summarize(allowed); got != (algo.Result{Allowed: true, Quota: 6, Remaining: 2, ResetAfter: 14 * s}) {
		t.Fatalf("allowed summary = %+v", got)
	}
	levels[2].Result.RetryAfter = algo.Never
	if got := Summarize(levels); got.RetryAfter != algo.Never {
		t.Fatalf("Never did not win: %+v", got)
	}
	if got := Summarize(levels[3:]); got != (algo.Result{Allowed: true}) {
		t.Fatalf("shadow-only summary = %+v, want allowed and empty", got)
	}
}

// TestReadmeGoBlocks: every Go block of the README is code that go test
// compiles and runs: its lines, trimmed, are consecutive lines of a test
// file (an Example) or of a program under examples/.
