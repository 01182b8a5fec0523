// Command global links regions through relays that add latency and loads
// the checks of a limit across regions, side by side, in one run
// (bench/global.sh starts the servers and runs it):
//
//	global -delay 40ms -relay 127.0.0.1:7001=127.0.0.1:6379 ...     a relay: listen=target
//	       -target 'Sluice global|a|sluice-global|http://127.0.0.1:8080,http://127.0.0.1:8082' ...
//	       -limit 9000 -rate 100 -windows 2
//
// The relays start at once; the load waits for every target to answer,
// then for a window's start (a minute: the unit envoyproxy/ratelimit and
// gubernator's calendar durations share) at least -warm away, and runs for
// -windows windows. Each target gets -rate checks a second, sent on a
// schedule whatever the answers' latency (open loop), spread over its
// URLs (the region's instances), each check for one of -callers callers.
// An admitted check counts in the window its answer names (the time to
// its reset, or when the window resets); latency is of the checks sent
// in the measured windows. It prints
// a table per system: admitted per window against the limit, and each
// region's p50 and p99.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// window is the windows' length: envoyproxy/ratelimit's unit minute,
// gubernator's DURATION_IS_GREGORIAN minutes, Sluice's 1m.
const window = time.Minute

type list []string

func (l *list) String() string     { return strings.Join(*l, " ") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	var relays, targets list
	flag.Var(&relays, "relay", "listen=target: a relay holding each byte -delay each way (repeat)")
	flag.Var(&targets, "target", "system|region|kind|url[,url...]: kind is sluice-global, sluice-regional, envoy or gubernator (repeat)")
	delay := flag.Duration("delay", 40*time.Millisecond, "one-way delay of every relay")
	limit := flag.Int64("limit", 9000, "the global limit a window (a regional target's limit is this over the regions)")
	rate := flag.Float64("rate", 100, "checks a second each target is sent")
	windows := flag.Int("windows", 2, "windows measured")
	warm := flag.Duration("warm", 10*time.Second, "least warm-up before the first window")
	callers := flag.Int("callers", 100, "callers (the level under the limit)")
	flag.Parse()
	if err := run(relays, targets, *delay, *limit, *rate, *windows, *warm, *callers); err != nil {
		fmt.Fprintln(os.Stderr, "global:", err)
		os.Exit(1)
	}
}

// target is one system's checks in one region.
type target struct {
	system, region, kind string
	urls                 []string
	body                 func(caller int) []byte
	path                 string
	callers              int
	client               *http.Client

	mu      sync.Mutex
	lat     []time.Duration // checks sent in the measured windows
	latOK   []time.Duration // those admitted
	admit   []int64         // admitted by window
	denied  int
	errs    int
	lastErr string
	skipped atomic.Int64
}

func run(relays, targets list, delay time.Duration, limit int64, rate float64, windows int, warm time.Duration, callers int) error {
	for _, r := range relays {
		listen, to, ok := strings.Cut(r, "=")
		if !ok {
			return fmt.Errorf("-relay %q: want listen=target", r)
		}
		rl, err := redistest.ListenRelay(listen, to, delay)
		if err != nil {
			return fmt.Errorf("-relay %q: %w", r, err)
		}
		defer rl.Close()
	}
	var ts []*target
	for _, s := range targets {
		t, err := newTarget(s, limit, callers, windows)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	if len(ts) == 0 {
		return errors.New("no -target")
	}
	for _, t := range ts {
		if err := t.ready(time.Minute); err != nil {
			return err
		}
	}
	start := time.Now().Add(warm).Truncate(window).Add(window)
	end := start.Add(time.Duration(windows) * window)
	fmt.Fprintf(os.Stderr, "global: warm-up until %s, measuring until %s\n", start.Format(time.TimeOnly), end.Format(time.TimeOnly))
	var wg sync.WaitGroup
	var load0 string
	go func() { time.Sleep(time.Until(start)); load0 = loadavg() }()
	for _, t := range ts {
		wg.Add(1)
		go func() { defer wg.Done(); t.load(rate, start, end) }()
	}
	wg.Wait()
	report(ts, limit, windows, start, load0, loadavg(), delay, rate)
	return nil
}

func newTarget(spec string, limit int64, callers, windows int) (*target, error) {
	f := strings.Split(spec, "|")
	if len(f) != 4 {
		return nil, fmt.Errorf("-target %q: want system|region|kind|urls", spec)
	}
	t := &target{system: f[0], region: f[1], kind: f[2], urls: strings.Split(f[3], ","), admit: make([]int64, windows), callers: max(callers, 1),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}}}
	switch t.kind {
	case "sluice-global", "sluice-regional":
		node := strings.TrimPrefix(t.kind, "sluice-")
		t.path = "/v1/check"
		t.body = func(c int) []byte { return fmt.Appendf(nil, `{"path": [%q, "c%d"]}`, node, c) }
	case "envoy":
		t.path = "/json"
		b := []byte(`{"domain": "edge", "descriptors": [{"entries": [{"key": "api", "value": "global"}]}]}`)
		t.body = func(int) []byte { return b }
	case "gubernator":
		// GLOBAL (2) | DURATION_IS_GREGORIAN (4), duration 0: the minute.
		t.path = "/v1/GetRateLimits"
		b := fmt.Appendf(nil, `{"requests": [{"name": "global", "unique_key": "api", "hits": 1, "limit": %d, "duration": 0, "algorithm": 0, "behavior": 6}]}`, limit)
		t.body = func(int) []byte { return b }
	default:
		return nil, fmt.Errorf("-target %q: unknown kind %q", spec, t.kind)
	}
	return t, nil
}

// check sends one check to url and says whether it was admitted, and the
// end of the window that decided it, from the answer: Sluice's
// first level's reset_after_ns, envoyproxy/ratelimit's durationUntilReset (whole
// seconds), gubernator's reset_time, each rounded to the window.
func (t *target) check(url string, caller int) (bool, time.Time, error) {
	resp, err := t.client.Post(url+t.path, "application/json", bytes.NewReader(t.body(caller)))
	if err != nil {
		return false, time.Time{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	now := time.Now()
	if err != nil {
		return false, time.Time{}, err
	}
	if resp.StatusCode != 200 && resp.StatusCode != 429 {
		return false, time.Time{}, fmt.Errorf("%s answered %d: %s", url, resp.StatusCode, b)
	}
	var a struct {
		Levels []struct {
			Reset int64 `json:"reset_after_ns"`
		} `json:"levels"`
		Responses []struct {
			Status    json.RawMessage `json:"status"`
			Error     string          `json:"error"`
			ResetTime int64           `json:"reset_time,string"`
		} `json:"responses"`
		Statuses []struct {
			Reset string `json:"durationUntilReset"`
		} `json:"statuses"`
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return false, time.Time{}, fmt.Errorf("%s answered %s: %w", url, b, err)
	}
	ok := resp.StatusCode == 200
	var end time.Time
	switch t.kind {
	case "gubernator":
		if len(a.Responses) != 1 || a.Responses[0].Error != "" {
			return false, time.Time{}, fmt.Errorf("gubernator answered %s", b)
		}
		st := string(a.Responses[0].Status)
		ok = st != `"OVER_LIMIT"` && st != "1"
		end = time.UnixMilli(a.Responses[0].ResetTime)
	case "envoy":
		if len(a.Statuses) == 1 {
			if d, err := time.ParseDuration(a.Statuses[0].Reset); err == nil {
				end = now.Add(d)
			}
		}
	default: // the path's first level: the limit measured
		if len(a.Levels) > 0 {
			end = now.Add(time.Duration(a.Levels[0].Reset))
		}
	}
	if end.IsZero() {
		return false, time.Time{}, fmt.Errorf("%s answered %s: no reset", url, b)
	}
	return ok, end.Add(window / 2).Truncate(window), nil
}

// ready waits until every URL answers a check.
func (t *target) ready(max time.Duration) error {
	deadline := time.Now().Add(max)
	for _, u := range t.urls {
		for {
			_, _, err := t.check(u, 0)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s in %s: %w", t.system, t.region, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// load sends checks at rate from now until end, counting those in the
// windows from start.
func (t *target) load(rate float64, start, end time.Time) {
	every := time.Duration(float64(time.Second) / rate)
	var inflight atomic.Int64
	var wg sync.WaitGroup
	next := time.Now()
	for i := 0; next.Before(end); i++ {
		time.Sleep(time.Until(next))
		next = next.Add(every)
		if inflight.Load() >= 512 {
			t.skipped.Add(1)
			continue
		}
		inflight.Add(1)
		wg.Add(1)
		url, caller := t.urls[i%len(t.urls)], rand.IntN(t.callers)
		go func() {
			defer func() { inflight.Add(-1); wg.Done() }()
			t0 := time.Now()
			ok, wend, err := t.check(url, caller)
			t1 := time.Now()
			t.mu.Lock()
			defer t.mu.Unlock()
			if w := int(wend.Sub(start)/window) - 1; ok && err == nil && wend.After(start) && w < len(t.admit) {
				t.admit[w]++ // whenever it was sent
			}
			if t0.Before(start) || !t0.Before(end) {
				return
			}
			t.lat = append(t.lat, t1.Sub(t0))
			switch {
			case err != nil:
				t.errs++
				t.lastErr = err.Error()
			case ok:
				t.latOK = append(t.latOK, t1.Sub(t0))
			default:
				t.denied++
			}
		}()
	}
	wg.Wait()
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func quantile(l []time.Duration, q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(int(float64(len(l))*q), len(l)-1)]
}

// report prints what each system admitted per window, against its limit,
// and each region's latency.
func report(ts []*target, limit int64, windows int, start time.Time, load0, load1 string, delay time.Duration, rate float64) {
	fmt.Printf("%d windows of %s from %s UTC; relays %s each way; %.0f checks/s per region and system; load average %s at the start, %s at the end\n\n",
		windows, window, start.UTC().Format(time.TimeOnly), delay, rate, load0, load1)
	var systems []string
	regions := map[string]int{}
	for _, t := range ts {
		if !slices.Contains(systems, t.system) {
			systems = append(systems, t.system)
		}
		regions[t.system]++
	}
	fmt.Println("| system | window | admitted | limit | over |")
	fmt.Println("|---|--:|--:|--:|--:|")
	for _, s := range systems {
		for w := range windows {
			var sum int64
			var per []string
			for _, t := range ts {
				if t.system == s {
					sum += t.admit[w]
					per = append(per, fmt.Sprintf("%s %d", t.region, t.admit[w]))
				}
			}
			lim := limit
			if strings.Contains(ts[slices.IndexFunc(ts, func(t *target) bool { return t.system == s })].kind, "regional") {
				lim = limit / int64(regions[s]) * int64(regions[s])
			}
			fmt.Printf("| %s | %d (%s) | %d | %d | %d |\n", s, w+1, strings.Join(per, ", "), sum, lim, max(sum-lim, 0))
		}
	}
	fmt.Println()
	fmt.Println("| system | region | checks | admitted | denied | errors | skipped | p50 | p99 | p99 of the admitted |")
	fmt.Println("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, t := range ts {
		slices.Sort(t.lat)
		slices.Sort(t.latOK)
		fmt.Printf("| %s | %s | %d | %d | %d | %d | %d | %s | %s | %s |\n", t.system, t.region, len(t.lat), len(t.latOK), t.denied, t.errs,
			t.skipped.Load(), ms(quantile(t.lat, 0.5)), ms(quantile(t.lat, 0.99)), ms(quantile(t.latOK, 0.99)))
		if t.lastErr != "" {
			fmt.Fprintf(os.Stderr, "global: %s in %s, last error: %s\n", t.system, t.region, t.lastErr)
		}
	}
}
