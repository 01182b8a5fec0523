package algo

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func buildJSON(t *testing.T, src string) (Limit, error) {
	t.Helper()
	var s Spec
	if err := json.Unmarshal([]byte(src), &s); err != nil {
		return nil, err
	}
	return s.Build()
}

func TestWindowedSpecs(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want Limit
	}{
		{`{"algorithm": "sliding_log", "limits": [{"limit": 1000, "window": "1h"}, {"limit": 100, "window": "1m"}], "min_gap": "100ms"}`,
			SlidingLog{Limits: []Window{{Count: 1000, Window: time.Hour}, {Count: 100, Window: time.Minute}}, MinGap: 100 * time.Millisecond}},
		// Named limits are ordered by window, then name.
		{`{"algorithm": "sliding_log", "limits": {"hour": {"limit": 1000, "window": "1h"}, "b": {"limit": 50, "window": "1m"}, "a": {"limit": 100, "window": "1m"}}, "buckets": 60, "mode": "uniform"}`,
			SlidingLog{Limits: []Window{{Name: "a", Count: 100, Window: time.Minute}, {Name: "b", Count: 50, Window: time.Minute}, {Name: "hour", Count: 1000, Window: time.Hour}}, Buckets: 60, Mode: Uniform}},
		{`{"algorithm": "sliding_log", "limits": [{"name": "burst", "limit": 5, "window": "1s"}], "mode": "nary"}`,
			SlidingLog{Limits: []Window{{Name: "burst", Count: 5, Window: time.Second}}, Mode: Nary}},
		{`{"algorithm": "window_counter", "limits": [{"limit": 1000, "window": "1s"}, {"limit": 5000, "window": "10s"}, {"limit": 7000, "window": "15s"}]}`,
			WindowCounter{Limits: []Window{{Count: 1000, Window: time.Second}, {Count: 5000, Window: 10 * time.Second}, {Count: 7000, Window: 15 * time.Second}}}},
		{`{"algorithm": "window_counter", "slice": "100ms", "limits": {"fast": {"limit": 10, "window": "500ms"}}}`,
			WindowCounter{Slice: 100 * time.Millisecond, Limits: []Window{{Name: "fast", Count: 10, Window: 500 * time.Millisecond}}}},
	} {
		got, err := buildJSON(t, tc.src)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.src, got, tc.want)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{`{"algorithm": "sliding_log", "limits": [{"limit": 1, "window": "1s"}], "buckets": 0}`, "buckets must be positive, got 0"},
		{`{"algorithm": "sliding_log", "limits": {"a": {"name": "b", "limit": 1, "window": "1s"}}}`, `limit "a" has another name "b"`},
		{`{"algorithm": "sliding_log", "limits": 5}`, "limits must be a list"},
		{`{"algorithm": "sliding_log", "limits": [], "burst": 1}`, `sliding_log does not take "burst"`},
		{`{"algorithm": "gate", "interval": "1s", "min_gap": "1s"}`, `gate does not take "min_gap"`},
		{`{"algorithm": "gate", "interval": "1s", "buckets": 0}`, `gate does not take "buckets"`},
		// A field another algorithm takes for the same thing is named.
		{`{"algorithm": "token_bucket", "burst": 5, "rate": 5, "period": "1s"}`, `token_bucket does not take "period": it says "per"`},
		{`{"algorithm": "token_bucket", "burst": 5, "count": 5, "per": "1s"}`, `token_bucket does not take "count": it says "rate"`},
		{`{"algorithm": "gcra", "burst": 5, "count": 5, "per": "1s"}`, `gcra does not take "per": it says "period"`},
		{`{"algorithm": "gate", "window": "1s"}`, `gate does not take "window": it says "interval"`},
		{`{"algorithm": "window_counter", "limit": 5, "window": "1s"}`, `window_counter does not take "limit": it says "limits" (a list of {limit, window})`},
	} {
		_, err := buildJSON(t, tc.src)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", tc.src, err, tc.want)
		}
	}
}
