package server

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proxytest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPrometheusDashboardQueries starts Debian's prometheus scraping a
// service on Redis under load (checks allowed and limited over HTTP and
// forward-auth, a leased node, a global node with a home, malformed
// requests, a queue), and
// evaluates every query of docs/grafana-dashboard.json through
// Prometheus's HTTP API until each returns a number. It waits as long as
// that takes: the test's own timeout is the only bound.
func TestPrometheusDashboardQueries(t *testing.T) {
	dash := readDashboard(t)

	r := redistest.Start(t)
	cfg := Config{
		Store: r.URL(), HTTP: "127.0.0.1:0", GRPC: "off",
		PolicyData: []byte(`
schema:
  web:
    children:
      "*": {limits: [2, 1, 3600]}
  hot:
    lease: true
    limits: {algorithm: fixed_window, limit: 1000000, window: 1h}
  slots:
    children:
      "*": {limits: [{algorithm: concurrency, limit: 3, hold_for: 1m}]}
  everywhere:
    global: true
    limits: {algorithm: fixed_window, limit: 1000000, window: 1h}
`),
		Queues:      map[string]QueueConfig{"jobs": {Capacity: 100}},
		ForwardAuth: ForwardAuthConfig{Routes: []ForwardRoute{{Match: "/", Path: []string{"web", "{header:X-Key}"}}}},
	}
	cfg.Redis.Home = redistest.Start(t).URL()
	s := serveForTest(t, cfg)
	base := "http://" + s.HTTPAddr()

	// Load until the queries are answered: allowed and limited checks,
	// forward-auth, a leased node, malformed bodies, queued entries,
	// slots acquired, released, and renewed once released (lost).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		post := func(path, body string) []byte {
			resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
			if err != nil {
				return nil
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return b
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			post("/v1/check", fmt.Sprintf(`{"path": ["web", "u%d"]}`, i%20))
			post("/v1/check", `{"path": ["hot"]}`)
			post("/v1/check", `{"path": ["everywhere"]}`)
			post("/v1/check", `{"path": [`)
			if i%10 == 0 {
				post("/v1/queues/jobs", `{"payload": "job"}`)
			}
			var held DecisionJSON
			if json.Unmarshal(post("/v1/check", `{"path": ["slots", "t"]}`), &held) == nil && held.Permit != "" {
				slot := `{"path": ["slots", "t"], "permit": "` + held.Permit + `"}`
				post("/v1/release", slot)
				post("/v1/renew", slot)
			}
			req, _ := http.NewRequest("GET", base+"/v1/forward-auth", nil)
			req.Header.Set("X-Forwarded-Uri", "/page")
			req.Header.Set("X-Forwarded-Method", "GET")
			req.Header.Set("X-Key", "k"+strconv.Itoa(i%20))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(5 * time.Millisecond) // a steady load, not a flood
		}
	})
	defer func() { close(stop); wg.Wait() }()

	addr := proxytest.FreeAddr(t)
	// The shipped rules, checked by promtool, loaded and evaluated too.
	rules, err := filepath.Abs("../docs/prometheus-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	prom := proxytest.Prometheus(t, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: [%q]
`, rules, s.HTTPAddr()), addr)

	for { // until its database is open
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			// Grafana's $__rate_interval is at least four scrapes: an
			// hour here, so that a query has data from its second scrape
			// on, whenever the load (slowed by a busy machine) made it;
			// the job and instance variables select this service.
			if !strings.Contains(tg.Expr, `job=~"$job",instance=~"$instance"`) {
				t.Errorf("panel %q: %s selects no job and instance", p.Title, tg.Expr)
			}
			q := strings.NewReplacer("$__rate_interval", "1h", "$job", "sluice", "$instance", s.HTTPAddr()).Replace(tg.Expr)
			for {
				vals, err := promQuery(addr, q)
				if err != nil {
					t.Fatalf("panel %q: %s: %v\n%s", p.Title, q, err, prom.Output())
				}
				if len(vals) > 0 {
					break
				}
				// Bounded in scrapes, not in time: 30 scrapes of a
				// service under load leave no query without data.
				if scrapes, _ := promValue(addr, `count_over_time(up{job="sluice"}[1h])`); scrapes >= 30 {
					t.Fatalf("panel %q: %s has no data after %v scrapes", p.Title, q, scrapes)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	// Every rule loaded and evaluated without an error, and the recorded
	// series of this service have data.
	for _, rec := range []string{"sluice:checks:rate5m", "sluice:limited:ratio5m", "sluice:check_duration_seconds:p99_5m", "sluice:decisions_limited:rate5m"} {
		q := rec + `{job="sluice"}`
		for {
			vals, err := promQuery(addr, q)
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if len(vals) > 0 {
				break
			}
			if scrapes, _ := promValue(addr, `count_over_time(up{job="sluice"}[1h])`); scrapes >= 30 {
				t.Fatalf("recording rule %s has no data after %v scrapes", rec, scrapes)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	resp, err := http.Get("http://" + addr + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	var rulesAPI struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				}
			}
		}
	}
	err = json.NewDecoder(resp.Body).Decode(&rulesAPI)
	resp.Body.Close()
	n := 0
	for _, g := range rulesAPI.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health == "err" {
				t.Errorf("rule %s: %s", r.Name, r.LastError)
			}
		}
	}
	if err != nil || n != 10 {
		t.Errorf("Prometheus loaded %d rules (%v), want the 10 of docs/prometheus-rules.yaml", n, err)
	}
}

// promValue evaluates q now and returns its first sample's value (0 when
// it has none).
func promValue(addr, q string) (float64, error) {
	vals, err := promQuery(addr, q)
	if err != nil || len(vals) == 0 {
		return 0, err
	}
	return vals[0], nil
}

// promQuery evaluates q now and returns its samples that are numbers (not
// NaN).
func promQuery(addr, q string) ([]float64, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     json.RawMessage
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", out.Error)
	}
	var samples [][2]any
	switch out.Data.ResultType {
	case "vector":
		var v []struct{ Value [2]any }
		if err := json.Unmarshal(out.Data.Result, &v); err != nil {
			return nil, err
		}
		for _, x := range v {
			samples = append(samples, x.Value)
		}
	case "scalar":
		var x [2]any
		if err := json.Unmarshal(out.Data.Result, &x); err != nil {
			return nil, err
		}
		samples = append(samples, x)
	}
	var vals []float64
	for _, x := range samples {
		if f, err := strconv.ParseFloat(fmt.Sprint(x[1]), 64); err == nil && !math.IsNaN(f) {
			vals = append(vals, f)
		}
	}
	return vals, nil
}
