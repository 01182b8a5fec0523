package server

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/server/envoyimport"
)

// TestEnvoyReadmeConfigs imports a directory of configurations written in
// envoyproxy/ratelimit's documented format, one per example of its README
// (envoyimport/testdata/readme), serves the result, and checks each
// example's documented answers descriptor by descriptor.
func TestEnvoyReadmeConfigs(t *testing.T) {
	dir := "envoyimport/testdata/readme"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []envoyimport.File
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, envoyimport.File{Name: e.Name(), Data: data})
	}
	pol, warnings, err := envoyimport.Convert(files, "")
	for _, w := range warnings {
		if !strings.Contains(w, "detailed_metric is dropped") { // README example 08 sets it
			t.Errorf("warning %q", w)
		}
	}
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	// The same files decide the same way converted by import-envoy and
	// served as a runtime directory (envoy_config_dir).
	for _, mode := range []string{"import-envoy", "envoy_config_dir"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "import-envoy" {
				envoyReadmeAnswers(t, newTestServer(t, string(pol)))
			} else {
				envoyReadmeAnswers(t, newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: dir}))
			}
		})
	}
}

// envoyReadmeAnswers checks each README example's documented answers.
func envoyReadmeAnswers(t *testing.T, s *Server) {
	g := &rateLimitService{s: s}
	ctx := context.Background()

	// ask sends one request of the domain's descriptors n times and
	// returns the last answer.
	ask := func(n int, domain string, ds ...*rlcommon.RateLimitDescriptor) *rlv3.RateLimitResponse {
		t.Helper()
		var r *rlv3.RateLimitResponse
		for range n {
			var err error
			if r, err = g.ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: domain, Descriptors: ds}); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	codes := func(r *rlv3.RateLimitResponse) string {
		out := []string{r.OverallCode.String()}
		for _, st := range r.Statuses {
			out = append(out, st.Code.String())
		}
		return strings.Join(out, " ")
	}
	expect := func(name string, r *rlv3.RateLimitResponse, want string) {
		t.Helper()
		if got := codes(r); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}

	// 1: each value its own 500 a second; another value is not limited.
	expect("1 users x500", ask(500, "mongo_cps", desc("database", "users")), "OK OK")
	expect("1 users 501st", ask(1, "mongo_cps", desc("database", "users")), "OVER_LIMIT OVER_LIMIT")
	expect("1 default", ask(1, "mongo_cps", desc("database", "default")), "OK OK")
	expect("1 other value", ask(1000, "mongo_cps", desc("database", "other")), "OK OK")

	// 2: 5 marketing messages a day to one number, 100 messages a day.
	both := []*rlcommon.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061111111"), desc("to_number", "2061111111")}
	expect("2 marketing x5", ask(5, "messaging", both...), "OK OK OK")
	expect("2 marketing 6th", ask(1, "messaging", both...), "OVER_LIMIT OVER_LIMIT OK")
	expect("2 another number", ask(1, "messaging", desc("message_type", "marketing", "to_number", "2062222222")), "OK OK")

	// 3: the named address is denied everything; the others get 10.
	r := ask(1, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	expect("3 blocked", r, "OVER_LIMIT OVER_LIMIT")
	if cl := r.Statuses[0].CurrentLimit; cl.GetRequestsPerUnit() != 0 || cl.GetUnit() != rlv3.RateLimitResponse_RateLimit_SECOND {
		t.Errorf("3 blocked: current limit %v, want 0 per second", cl)
	}
	expect("3 any x10", ask(10, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), "OK OK")
	expect("3 any 11th", ask(1, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), "OVER_LIMIT OVER_LIMIT")

	// 4: two entries do not match a limit at the first level.
	expect("4 deeper than the limit", ask(301, "example4", desc("key", "value", "subkey", "subvalue")), "OK OK")
	expect("4 nested x300", ask(300, "example4", desc("other", "value", "subkey", "subvalue")), "OK OK")
	expect("4 nested 301st", ask(1, "example4", desc("other", "value", "subkey", "subvalue")), "OVER_LIMIT OVER_LIMIT")

	// 5: unlimited answers OK with the most remaining.
	r = ask(1000, "internal", desc("ldap", "cn=x"))
	expect("5 ldap", r, "OK OK")
	if r.Statuses[0].LimitRemaining != math.MaxUint32 {
		t.Errorf("5 ldap: limit_remaining %d, want 2^32-1", r.Statuses[0].LimitRemaining)
	}
	expect("5 azure 101st", ask(101, "internal", desc("azure", "a")), "OVER_LIMIT OVER_LIMIT")

	// 6: user-a's breach is only reported; user-b is limited.
	r = ask(11, "example6", desc("service", "auth-service", "user", "user-a"))
	expect("6 user-a 11th", r, "OK OK")
	if r.Statuses[0].LimitRemaining != 0 {
		t.Errorf("6 user-a: limit_remaining %d, want the breach reported as 0", r.Statuses[0].LimitRemaining)
	}
	expect("6 user-b 21st", ask(21, "example6", desc("service", "auth-service", "user", "user-b")), "OVER_LIMIT OVER_LIMIT")

	// 7: together, the replacing limit (10) applies and the replaced one
	// (5) is neither checked nor counted; alone, the 5 apply.
	pair := []*rlcommon.RateLimitDescriptor{desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")}
	expect("7 pair x10", ask(10, "example7", pair...), "OK OK OK")
	expect("7 pair 11th", ask(1, "example7", pair...), "OVER_LIMIT OK OVER_LIMIT")
	expect("7 alone x5", ask(5, "example7", desc("key_1", "value_1", "user", "bkthomps")), "OK OK")
	r = ask(1, "example7", desc("key_1", "value_1", "user", "bkthomps"))
	expect("7 alone 6th", r, "OVER_LIMIT OVER_LIMIT")
	if n := r.Statuses[0].CurrentLimit.GetName(); n != "specific_limit" {
		t.Errorf("7: current_limit.name %q, want the rate_limit's name specific_limit, as Envoy answers", n)
	}

	// 8: 10 for any value, 20 for value1.
	expect("8 any 11th", ask(11, "example8", desc("key1", "unspecified_value")), "OVER_LIMIT OVER_LIMIT")
	expect("8 value1 x20", ask(20, "example8", desc("key1", "value1")), "OK OK")

	// 9: wildcards; each matching value has its own counter.
	expect("9 value1 x20", ask(20, "example9", desc("key1", "value1")), "OK OK")
	expect("9 value1 21st", ask(1, "example9", desc("key1", "value1")), "OVER_LIMIT OVER_LIMIT")
	expect("9 valueXYZ", ask(20, "example9", desc("key1", "valueXYZ")), "OK OK")
	expect("9 middle 21st", ask(21, "example9", desc("path", "/api/123/action")), "OVER_LIMIT OVER_LIMIT")
	expect("9 middle, no match", ask(30, "example9", desc("path", "/api/123/other")), "OK OK")
	expect("9 several 21st", ask(21, "example9", desc("route", "/api/v1/resource/123/action")), "OVER_LIMIT OVER_LIMIT")
	expect("9 several, another", ask(1, "example9", desc("route", "/api/v2/resource/456/action")), "OK OK")

	// 10: 60 a minute per subject.
	expect("10 x60", ask(60, "example10", desc("route", "api", "http_method", "GET", "subject_id", "123")), "OK OK")
	expect("10 61st", ask(1, "example10", desc("route", "api", "http_method", "GET", "subject_id", "123")), "OVER_LIMIT OVER_LIMIT")
	expect("10 another subject", ask(1, "example10", desc("route", "web", "http_method", "POST", "subject_id", "456")), "OK OK")

	// 11: files/* share 10 an hour; files_no_share/* count apart.
	ask(5, "example11", desc("files", "files/a.pdf"))
	ask(5, "example11", desc("files", "files/b.csv"))
	expect("11 shared, 11th", ask(1, "example11", desc("files", "files/c.txt")), "OVER_LIMIT OVER_LIMIT")
	expect("11 apart x10", ask(10, "example11", desc("files_no_share", "files_no_share/a.pdf")), "OK OK")
	expect("11 apart, another", ask(1, "example11", desc("files_no_share", "files_no_share/b.csv")), "OK OK")
}

// TestEnvoyConfigDirSymlinkSwap: a runtime directory laid out as a
// Kubernetes ConfigMap is (files that are links through ..data into a
// timestamped directory, which an update swaps by renaming a new link
// over ..data) is served, and a swap is applied at the next polls that
// find it settled.
func TestEnvoyConfigDirSymlinkSwap(t *testing.T) {
	root := t.TempDir()
	version := func(name string, n int) {
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n)
		if err := os.WriteFile(filepath.Join(dir, "ratelimit.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(root, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(root, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_11_26_v1", 2)
	if err := os.Symlink(filepath.Join("..data", "ratelimit.yaml"), filepath.Join(root, "ratelimit.yaml")); err != nil {
		t.Fatal(err)
	}
	s := newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: root, WatchInterval: -1})
	g := &rateLimitService{s: s}
	limit := func() uint32 {
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limit(); got != 2 {
		t.Fatalf("served %d a minute, want the files' 2", got)
	}
	version("..2026_11_26_v2", 5)
	s.reloadIfChanged() // sees the change
	s.reloadIfChanged() // finds it settled: loads it
	if got := limit(); got != 5 {
		t.Fatalf("after the swap: %d a minute, want 5", got)
	}
}

// TestRuntimeRootSwapSameSizeAndTime: RUNTIME_ROOT a symlink that is
// swapped (as Envoy's runtime is) from one directory to another whose file
// has the same name, size and modification time (written in one tick of a
// coarse clock, or copied with rsync -t) but another limit: the watcher's
// polls load the new one.
func TestRuntimeRootSwapSameSizeAndTime(t *testing.T) {
	root := t.TempDir()
	mtime := time.Date(2026, 11, 26, 4, 44, 6, 0, time.UTC)
	for name, n := range map[string]int{"v1": 3, "v2": 5} {
		dir := filepath.Join(root, name, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "config.yaml")
		cfg := fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", n)
		if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	current := filepath.Join(root, "current")
	if err := os.Symlink("v1", current); err != nil {
		t.Fatal(err)
	}
	s := newTestServerConfig(t, Config{Store: "memory", EnvoyConfigDir: filepath.Join(current, "ratelimit", "config"), WatchInterval: -1})
	g := &rateLimitService{s: s}
	limit := func() uint32 {
		r, err := g.ShouldRateLimit(context.Background(), &rlv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limit(); got != 3 {
		t.Fatalf("served %d a minute, want v1's 3", got)
	}
	a, _ := os.Stat(filepath.Join(root, "v1", "ratelimit", "config", "config.yaml"))
	b, _ := os.Stat(filepath.Join(root, "v2", "ratelimit", "config", "config.yaml"))
	if a.Size() != b.Size() || !a.ModTime().Equal(b.ModTime()) {
		t.Fatalf("the files differ in size or time: %d %v, %d %v", a.Size(), a.ModTime(), b.Size(), b.ModTime())
	}
	// Swap the link as Envoy's runtime does: a new link renamed over it.
	tmp := filepath.Join(root, "current.tmp")
	if err := os.Symlink("v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	// A change is loaded at the poll that finds it settled, the second;
	// ten are plenty.
	for range 10 {
		s.reloadIfChanged()
	}
	if got := limit(); got != 5 {
		t.Fatalf("after the swap: %d a minute, want v2's 5", got)
	}
}
