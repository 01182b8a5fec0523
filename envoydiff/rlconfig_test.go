package envoydiff

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// sameRLConfig: GET /rlconfig on the debug port (DEBUG_PORT) prints the
// same lines from both services of p, which hold configs configurations
// (envoyproxy/ratelimit prints them in its maps' order: the lines are
// compared as a set).
func sameRLConfig(t *testing.T, p *pair, configs int) {
	get := func(s *service) []string {
		c := http.Client{Timeout: 2 * time.Minute} // a hang detector, not a speed bound
		resp, err := c.Get("http://" + s.debug + "/rlconfig")
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: GET /rlconfig: %d %v", s.name, resp.StatusCode, err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		slices.Sort(lines)
		return lines
	}
	envoy, sluice := get(p.envoy), get(p.sluice)
	for _, l := range envoy {
		if _, found := slices.BinarySearch(sluice, l); !found {
			t.Errorf("only envoyproxy/ratelimit prints %q", l)
		}
	}
	for _, l := range sluice {
		if _, found := slices.BinarySearch(envoy, l); !found {
			t.Errorf("only Sluice prints %q", l)
		}
	}
	if len(envoy) < configs {
		t.Errorf("%d lines from envoyproxy/ratelimit for %d configurations", len(envoy), configs)
	}
	t.Logf("%d lines alike", len(envoy))
}
