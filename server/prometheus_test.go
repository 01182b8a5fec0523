package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
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
// forward-auth, a leased node, malformed requests, a queue), and
// evaluates every query of docs/grafana-dashboard.json through
// Prometheus's HTTP API until each returns a number. It waits as long as
// that takes: the test's own timeout is the only bound.
func TestPrometheusDashboardQueries(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}

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
`),
		Queues:      map[string]QueueConfig{"jobs": {Capacity: 100}},
		ForwardAuth: ForwardAuthConfig{Routes: []ForwardRoute{{Match: "/", Path: []string{"web", "{header:X-Key}"}}}},
	}
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { s.Serve(ctx, nil); close(served) }()
	defer func() { cancel(); <-served; s.Close() }()
	base := "http://" + s.HTTPAddr()

	// Load until the queries are answered: allowed and limited checks,
	// forward-auth, a leased node, malformed bodies, queued entries.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		post := func(path, body string) {
			resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			post("/v1/check", fmt.Sprintf(`{"path": ["web", "u%d"]}`, i%20))
			post("/v1/check", `{"path": ["hot"]}`)
			post("/v1/check", `{"path": [`)
			if i%10 == 0 {
				post("/v1/queues/jobs", `{"payload": "job"}`)
			}
			req, _ := http.NewRequest("GET", base+"/v1/forward-auth", nil)
			req.Header.Set("X-Forwarded-Uri", "/page")
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
	prom := proxytest.Prometheus(t, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: [%q]
`, s.HTTPAddr()), addr)

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
			// Grafana's $__rate_interval is at least four scrapes.
			q := strings.ReplaceAll(tg.Expr, "$__rate_interval", "5s")
			for {
				n, err := promQuery(addr, q)
				if err != nil {
					t.Fatalf("panel %q: %s: %v\n%s", p.Title, q, err, prom.Output())
				}
				if n > 0 {
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
}

// promValue evaluates q now and returns its first sample's value (0 when
// it has none).
func promValue(addr, q string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Data struct{ Result []struct{ Value [2]any } }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Data.Result) == 0 {
		return 0, err
	}
	return strconv.ParseFloat(fmt.Sprint(out.Data.Result[0].Value[1]), 64)
}

// promQuery evaluates q now and returns how many of its samples are
// numbers (not NaN).
func promQuery(addr, q string) (int, error) {
	resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
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
		return 0, err
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("prometheus: %s", out.Error)
	}
	var vals []string
	switch out.Data.ResultType {
	case "vector":
		var v []struct{ Value [2]any }
		if err := json.Unmarshal(out.Data.Result, &v); err != nil {
			return 0, err
		}
		for _, s := range v {
			vals = append(vals, fmt.Sprint(s.Value[1]))
		}
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(out.Data.Result, &s); err != nil {
			return 0, err
		}
		vals = append(vals, fmt.Sprint(s[1]))
	}
	n := 0
	for _, v := range vals {
		if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) {
			n++
		}
	}
	return n, nil
}
