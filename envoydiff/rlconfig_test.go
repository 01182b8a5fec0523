package envoydiff

import (
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRLConfigAgainstEnvoy: GET /rlconfig on the debug port (DEBUG_PORT)
// prints the same lines from both services, for every feature's
// configuration and every README example loaded at once (envoyproxy/
// ratelimit prints them in its maps' order: the lines are compared as a
// set).
func TestRLConfigAgainstEnvoy(t *testing.T) {
	bin := build(t)
	readme, err := readmeExamples(bin.readme)
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string]string{}
	for _, f := range append(slices.Clone(features), readme...) {
		cfg, _, _ := f.gen(rand.New(rand.NewPCG(1, 1)))
		configs[f.name+".yaml"] = strings.Replace(cfg, "domain: DOMAIN", "domain: "+f.name, 1)
	}
	p := startPair(t, bin, "default", nil, configs)
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
		if !slices.Contains(sluice, l) {
			t.Errorf("only envoyproxy/ratelimit prints %q", l)
		}
	}
	for _, l := range sluice {
		if !slices.Contains(envoy, l) {
			t.Errorf("only Sluice prints %q", l)
		}
	}
	if len(envoy) < len(configs) {
		t.Errorf("%d lines from envoyproxy/ratelimit for %d configurations", len(envoy), len(configs))
	}
	t.Logf("%d lines alike", len(envoy))
}
