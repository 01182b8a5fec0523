package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/pkitest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// freePort returns a port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestRunAsRatelimit: started as envoyproxy/ratelimit's /bin/ratelimit,
// with only that service's variables, as Envoy Gateway sets them (a Redis
// over TCP, its configuration directory, a gRPC server with mutual TLS),
// Sluice serves checks by that directory's files on Redis to a client with
// a certificate the CA signed, refuses one without, answers /healthcheck,
// and names a variable it does not honour.
func TestRunAsRatelimit(t *testing.T) {
	rd := redistest.Start(t)
	pki := pkitest.New(t)
	cert, key, _ := pki.Issue(t, "ratelimit", true)
	clientCert, clientKey, _ := pki.Issue(t, "envoy", false)
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, filepath.Join(root, "ratelimit", "config", "gw.yaml"), "domain: gw\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	writeTestFile(t, filepath.Join(root, "ratelimit", "config", ".hidden.yaml"), "not: [a config")
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(sluiceBin, bin); err != nil {
		t.Fatal(err)
	}
	httpPort, grpcPort, debugPort := freePort(t), freePort(t), freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOST=127.0.0.1", "PORT=" + httpPort, "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + grpcPort, "DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + debugPort,
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rd.Addr, "REDIS_TYPE=SINGLE",
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + key, "GRPC_CLIENT_TLS_CACERT=" + pki.CAFile(),
		"LOG_LEVEL=info", "USE_STATSD=false", "REDIS_TIMEOUT=2s",
		// Not one of ratelimit's: REDIS_TIMEOUT is not honoured (the log
		// says so), and the 50ms default is a timeout a busy machine misses,
		// its check then allowed by on_store_error and not counted.
		"SLUICE_TIMEOUT=" + cliTimeout,
	}
	p := serveCmd(t, cmd)
	if p.grpc != "127.0.0.1:"+grpcPort || p.http != "127.0.0.1:"+httpPort {
		t.Fatalf("listening on %s and %s, want the variables' ports", p.grpc, p.http)
	}
	p.waitLog("REDIS_TIMEOUT")

	roots := x509.NewCertPool()
	roots.AddCert(pki.CA)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(c *tls.Config) (*rlv3.RateLimitResponse, error) {
		conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(c)))
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		return rlv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlv3.RateLimitRequest{Domain: "gw",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}})
	}
	for i, want := range []rlv3.RateLimitResponse_Code{rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OK, rlv3.RateLimitResponse_OVER_LIMIT} {
		r, err := ask(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}})
		if err != nil || r.OverallCode != want {
			t.Fatalf("check %d with a client certificate: %v %v", i, r, err)
		}
	}
	if _, err := ask(&tls.Config{RootCAs: roots}); err == nil {
		t.Error("a client without a certificate was answered")
	}
	if n, err := rd.Do("DBSIZE"); err != nil || n == "0" {
		t.Errorf("the checks left nothing in Redis: %q %v", n, err)
	}
	if a := do(t, "GET", "http://127.0.0.1:"+httpPort+"/healthcheck", "", ""); a.status != 200 {
		t.Errorf("/healthcheck: %d", a.status)
	}
	if a := do(t, "GET", "http://127.0.0.1:"+debugPort+"/metrics", "", ""); a.status != 200 || !strings.Contains(string(a.body), "sluice_checks_total") {
		t.Errorf("metrics on DEBUG_PORT: %d", a.status)
	}
}

// TestEnvoyRedisURL: envoyproxy/ratelimit's Redis settings become Sluice's
// store URL: one server, a Cluster, Sentinel, a password, TLS; a Unix
// socket is refused with what to set.
func TestEnvoyRedisURL(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_URL": "redis:6379"}, "redis://redis:6379/0"},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_AUTH": "s3cret", "REDIS_TLS": "true"}, "rediss://:s3cret@redis:6379/0"},
		{map[string]string{"REDIS_URL": "redis:6379", "REDIS_AUTH": "user:s3cret"}, "redis://user:s3cret@redis:6379/0"},
		{map[string]string{"REDIS_URL": "a:1,b:2,c:3", "REDIS_TYPE": "cluster"}, "redis://a:1/0?addr=b%3A2&addr=c%3A3"},
		{map[string]string{"REDIS_URL": "mymaster,s1:26379,s2:26379", "REDIS_TYPE": "SENTINEL"}, "redis://s1:26379/0?addr=s2%3A26379&master_set=mymaster"},
		{map[string]string{"REDIS_URL": "redis://x:1/2"}, "redis://x:1/2"},
	} {
		c.env["REDIS_SOCKET_TYPE"] = "tcp"
		var cfg server.Config
		if _, err := applyEnvoyEnv(&cfg, func(k string) string { return c.env[k] }); err != nil || cfg.Store != c.want {
			t.Errorf("%v: %q %v, want %q", c.env, cfg.Store, err, c.want)
		}
	}
	var cfg server.Config
	if _, err := applyEnvoyEnv(&cfg, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "REDIS_SOCKET_TYPE=tcp") {
		t.Errorf("the default Unix socket: %v", err)
	}
	ignored, err := applyEnvoyEnv(&cfg, func(k string) string {
		return map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "r:1", "NEAR_LIMIT_RATIO": "0.9", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "gw:18001"}[k]
	})
	if err != nil || len(ignored) != 1 || !strings.HasPrefix(ignored[0], "NEAR_LIMIT_RATIO") || cfg.XDSServer != "gw:18001" || cfg.XDSNodeID != "default" {
		t.Errorf("xds, NEAR_LIMIT_RATIO: %v %v %+v", ignored, err, cfg)
	}
}

// TestEnvoyCountingVars: the variables that change how envoyproxy/ratelimit
// counts and answers are honoured, and its local cache is off unless
// LOCAL_CACHE_SIZE_IN_BYTES sizes it, so that the drop-in counts as it does.
func TestEnvoyCountingVars(t *testing.T) {
	apply := func(env map[string]string) server.Config {
		t.Helper()
		env["REDIS_SOCKET_TYPE"], env["REDIS_URL"] = "tcp", "r:1"
		var cfg server.Config
		ignored, err := applyEnvoyEnv(&cfg, func(k string) string { return env[k] })
		if err != nil || len(ignored) != 0 {
			t.Fatalf("%v: %v %v", env, ignored, err)
		}
		return cfg
	}
	if cfg := apply(map[string]string{}); cfg.Envoy.Counts != "" || cfg.Envoy.ShadowMode || cfg.Redis.OverLimitCache >= 0 {
		t.Errorf("defaults: counts %q, shadow mode %v, over-limit cache %d: want Envoy's (each), off, off", cfg.Envoy.Counts, cfg.Envoy.ShadowMode, cfg.Redis.OverLimitCache)
	}
	cfg := apply(map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "SHADOW_MODE": "true", "LOCAL_CACHE_SIZE_IN_BYTES": "1000000"})
	if cfg.Envoy.Counts != "stop_when_over" || !cfg.Envoy.ShadowMode || cfg.Redis.OverLimitCache != 10000 {
		t.Errorf("set: counts %q, shadow mode %v, over-limit cache %d", cfg.Envoy.Counts, cfg.Envoy.ShadowMode, cfg.Redis.OverLimitCache)
	}
	if cfg := apply(map[string]string{"QUOTA_MODE": "true"}); !cfg.Envoy.QuotaMode {
		t.Errorf("QUOTA_MODE=true: envoy.quota_mode %v", cfg.Envoy.QuotaMode)
	}
}

// TestEnvoyVarsDocumented: docs/envoy-migration.md's table names every
// variable of envoyproxy/ratelimit that Sluice knows, and says for those
// it does not honour why, as the start's warning does.
func TestEnvoyVarsDocumented(t *testing.T) {
	page, err := os.ReadFile("../../docs/envoy-migration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range envoyVars {
		row := ""
		for _, l := range strings.Split(string(page), "\n") {
			if strings.HasPrefix(l, "| `"+v.name+"` |") {
				row = l
			}
		}
		switch {
		case row == "":
			t.Errorf("docs/envoy-migration.md has no row for %s", v.name)
		case v.not != "" && !strings.Contains(row, "not honoured: "+v.not):
			t.Errorf("the row of %s does not say why it is not honoured (%q): %s", v.name, v.not, row)
		}
	}
}

// TestEnvoyResponseHeadersEnv: LIMIT_RESPONSE_HEADERS_ENABLED and the
// LIMIT_*_HEADER names set envoy.response_headers and its names (at
// envoyproxy/ratelimit's defaults when unset), RESPONSE_DYNAMIC_METADATA
// envoy.dynamic_metadata, and none is reported as ignored.
func TestEnvoyResponseHeadersEnv(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want server.EnvoyConfig
	}{
		{map[string]string{}, server.EnvoyConfig{LimitHeader: "RateLimit-Limit", RemainingHeader: "RateLimit-Remaining", ResetHeader: "RateLimit-Reset"}},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-RateLimit-Limit", "LIMIT_REMAINING_HEADER": "X-RateLimit-Remaining", "LIMIT_RESET_HEADER": "X-RateLimit-Reset",
			"RESPONSE_DYNAMIC_METADATA": "true"},
			server.EnvoyConfig{ResponseHeaders: true, LimitHeader: "X-RateLimit-Limit", RemainingHeader: "X-RateLimit-Remaining", ResetHeader: "X-RateLimit-Reset", DynamicMetadata: true}},
	} {
		c.env["REDIS_SOCKET_TYPE"], c.env["REDIS_URL"] = "tcp", "r:1"
		var cfg server.Config
		ignored, err := applyEnvoyEnv(&cfg, func(k string) string { return c.env[k] })
		if err != nil || len(ignored) != 0 || cfg.Envoy != c.want {
			t.Errorf("%v: %+v, ignored %v, %v; want %+v", c.env, cfg.Envoy, ignored, err, c.want)
		}
	}
}
