package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store"
)

// examplePolicy is the policy `sluice serve` uses without --policy.
//
//go:embed limits.example.yaml
var examplePolicy []byte

// serveFlags are serve's flags, each setting the Config field of its yaml
// name (as server.EnvVars names them), which names the flag too: "-" for
// "." and "_" (flagName). Every one has its SLUICE_* variable
// (TestEveryFlagHasItsVariable).
var serveFlags = []struct{ field, usage string }{
	{"http", "HTTP listen address (default 127.0.0.1:8080; off disables)"},
	{"grpc", "gRPC listen address (default 127.0.0.1:8081; off disables)"},
	{"grpc_reflection", "gRPC server reflection, for grpcurl and grpcui: on (default) or off"},
	{"store", "store: memory (default), redis://[user:pass@]host:port/db, rediss://..., a Cluster seed list redis://h1:p1?addr=h2:p2, or Sentinel redis://h:26379?master_set=name"},
	{"policy", "limits.yaml to serve, reloaded on SIGHUP and when it changes (default: the bundled example)"},
	{"envoy_config_dir", "instead of --policy, serve envoyproxy/ratelimit's config directory as it is (its *.yaml files, reloaded when they change)"},
	{"xds_server", "instead of --policy, take Envoy's RateLimitConfig from this xDS management server (host:port; state of the world, as Envoy Gateway serves it)"},
	{"xds_node_id", "this instance's node id at the xDS server (default sluice)"},
	{"timeout", "decision timeout, a `duration`, store round trip included (default 50ms)"},
	{"on_store_error", "answer when the store fails: allow (default, fail open) or deny (fail closed)"},
	{"require_store", "exit non-zero when the store cannot be reached at start, instead of answering by on-store-error until it can (--require-store=false: the default)"},
	{"headers", "the rate-limit fields of HTTP answers: draft (the IETF RateLimit-Policy and RateLimit, default), legacy (X-RateLimit-*) or both"},
	{"admin_token", "bearer token of the /admin/ endpoints (prefer SLUICE_ADMIN_TOKEN or --admin-token-file; none disables them)"},
	{"admin_token_file", "file holding the admin token"},
	{"admin_http", "serve /admin/ on this address of its own, not on --http (metrics and health answer on both)"},
	{"shutdown_delay", "after SIGTERM, answer /readyz 503 for this `duration` before closing the listeners (default 0)"},
	{"redis.prefix", "prefix of Redis keys (default sluice:)"},
	{"redis.tls.ca_file", "CA file that verifies Redis's TLS certificate (turns TLS on)"},
	{"redis.tls.cert_file", "client certificate for Redis TLS"},
	{"redis.tls.key_file", "client key for Redis TLS"},
	{"watch_interval", "how often to poll the policy file for changes, a `duration` (default 1s; -1s disables)"},
	{"log_level", "debug, info (default), warn or error"},
	{"log_format", "text (default) or json"},
}

// olderFlags are the flags named before their fields named them.
var olderFlags = map[string]string{"redis.tls.ca_file": "redis-tls-ca", "redis.tls.cert_file": "redis-tls-cert", "redis.tls.key_file": "redis-tls-key"}

// flagName is the serve flag of a Config field.
func flagName(field string) string {
	if name, ok := olderFlags[field]; ok {
		return name
	}
	return strings.NewReplacer(".", "-", "_", "-").Replace(field)
}

// isBool reports whether a Config field is true or false: its flag may
// stand alone, as --require-store (a field that takes "true" but not "on").
func isBool(field string) bool {
	var c server.Config
	return c.Set(field, "true") == nil && c.Set(field, "on") != nil
}

// boolFlag is a flag's text that may stand alone, as a boolean flag does:
// --require-store is --require-store=true (Config.Set judges the text).
type boolFlag string

func (b *boolFlag) String() string     { return string(*b) }
func (b *boolFlag) Set(s string) error { *b = boolFlag(s); return nil }
func (b *boolFlag) IsBoolFlag() bool   { return true }

func runServe(ctx context.Context, e env, args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	configFile := fs.String("config", "", "read settings from this sluice.yaml (env and flags override it)")
	envoyEnv := fs.Bool("envoy-env", false, "read envoyproxy/ratelimit's environment variables (REDIS_URL, PORT, GRPC_PORT, RUNTIME_ROOT, CONFIG_TYPE, ...) as its service does, before SLUICE_* and flags; as when started as ratelimit")
	fields := map[string]string{} // flag -> field
	for _, f := range serveFlags {
		name := flagName(f.field)
		fields[name] = f.field
		if isBool(f.field) {
			fs.Var(new(boolFlag), name, f.usage)
			continue
		}
		fs.String(name, "", f.usage)
	}
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, `usage: sluice serve [flags]

Serves rate-limit decisions over HTTP/JSON (POST /v1/check) and as Envoy's
rate limit service over gRPC, with Prometheus metrics (/metrics), health
(/healthz, /readyz) and, given an admin token, admin endpoints (/admin/v1/).
With no flags: the memory store and the bundled example policy, on
127.0.0.1 only.

Settings come from --config sluice.yaml, then SLUICE_* environment
variables, then flags, each overriding the one before:`)
		for _, v := range server.EnvVars {
			fmt.Fprintf(e.stderr, "  %-38s %s\n", v.Name, v.Field)
		}
		fmt.Fprintln(e.stderr, `
A sluice.yaml has these fields and more: admission queues (queues: {jobs:
{capacity: 1000}}, served at POST /v1/queues/{name}) and the consumers
lists (consumers:); cmd/sluice/sluice.example.yaml in Sluice's source
shows every field with its default.

SIGHUP reloads the policy; SIGTERM or SIGINT drains in-flight requests and exits 0.

flags:`)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}

	var cfg server.Config
	if *configFile != "" {
		if err := server.LoadConfigFile(*configFile, &cfg); err != nil {
			fmt.Fprintf(e.stderr, "serve: %v\n", err)
			return 2
		}
	}
	var envoyIgnored []string
	if *envoyEnv {
		var err error
		if envoyIgnored, err = applyEnvoyEnv(&cfg, os.Getenv); err != nil {
			fmt.Fprintf(e.stderr, "serve: envoyproxy/ratelimit's variables: %v\n", err)
			return 2
		}
	}
	if err := server.ApplyEnv(&cfg, os.Getenv); err != nil {
		fmt.Fprintf(e.stderr, "serve: %v\n", err)
		return 2
	}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		field, ok := fields[f.Name]
		if !ok {
			return
		}
		if err := cfg.Set(field, f.Value.String()); err != nil && flagErr == nil {
			flagErr = fmt.Errorf("--%s: %w", f.Name, err)
		}
	})
	if flagErr != nil {
		fmt.Fprintf(e.stderr, "serve: %v\n", flagErr)
		return 2
	}
	cfg.PolicyData, cfg.PolicyName = examplePolicy, "limits.example.yaml (bundled)"
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(e.stderr, "serve: %v\n", err)
		return 2
	}
	logFile, _ := e.stderr.(*os.File)
	if logFile == nil {
		logFile = os.Stderr
	}
	log, err := server.NewLogger(cfg, logFile)
	if err != nil {
		fmt.Fprintf(e.stderr, "serve: %v\n", err)
		return 2
	}
	for _, v := range envoyIgnored {
		log.Warn("envoyproxy/ratelimit variable not honoured: " + v)
	}

	// The live heap is small and allocation is per request: collect less
	// often than the default (GOGC=100) unless GOGC says otherwise.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	srv, err := server.New(openCtx, cfg, log)
	cancel()
	if err != nil {
		var list yamlfile.ErrorList
		if errors.As(err, &list) {
			fmt.Fprintf(e.stderr, "serve: the policy has %d error(s):\n%v\n", len(list), list)
		} else {
			fmt.Fprintf(e.stderr, "serve: %v\n", err)
		}
		return 1
	}
	if err := srv.Listen(); err != nil {
		srv.Close()
		fmt.Fprintf(e.stderr, "serve: %v\n", err)
		return 1
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}()

	pingCtx, cancel := context.WithTimeout(ctx, max(time.Duration(cfg.Timeout), time.Second))
	storeErr := srv.PingStore(pingCtx)
	cancel()
	banner(e, cfg, srv, storeErr)
	log.Info("listening", "http", srv.HTTPAddr(), "grpc", srv.GRPCAddr(), "store", store.Scheme(cfg.Store),
		"policy", srv.Policy().Name(), "timeout", time.Duration(cfg.Timeout).String(), "on_store_error", cfg.OnStoreError)
	if err := srv.Serve(ctx, reload); err != nil {
		fmt.Fprintf(e.stderr, "serve: %v\n", err)
		return 1
	}
	return 0
}

// banner tells the user where the service listens and how to try it, and
// loudly when the store cannot be reached (storeErr).
func banner(e env, cfg server.Config, srv *server.Server, storeErr error) {
	var b strings.Builder
	b.WriteString("Sluice is serving.\n")
	if a := srv.HTTPAddr(); a != "" {
		fmt.Fprintf(&b, "  HTTP/JSON  http://%s   POST /v1/check, GET /metrics /healthz /readyz\n", a)
	}
	if a := srv.GRPCAddr(); a != "" {
		fmt.Fprintf(&b, "  gRPC       %s   envoy.service.ratelimit.v3.RateLimitService, grpc.health.v1.Health", a)
		if cfg.GRPCReflection == "on" && cfg.GRPCTLS == (server.TLSConfig{}) {
			fmt.Fprintf(&b, "; reflection: grpcurl -plaintext %s list", a)
		} else if cfg.GRPCReflection == "on" {
			b.WriteString("; reflection on")
		}
		b.WriteString("\n")
	}
	if a := srv.AdminAddr(); a != "" {
		fmt.Fprintf(&b, "  admin      http://%s   /admin/v1/..., GET /metrics /healthz /readyz\n", a)
	}
	fmt.Fprintf(&b, "  store      %s\n", store.Redact(cfg.Store))
	if storeErr != nil {
		answer := "ALLOWED (on_store_error: allow): nothing is rate limited"
		if cfg.OnStoreError == "deny" {
			answer = "DENIED with 503 (on_store_error: deny)"
		}
		fmt.Fprintf(&b, "  WARNING    the store is UNREACHABLE (%v): until it answers, every check is %s. Check the address, or set --require-store to exit instead.\n", storeErr, answer)
	}
	bundled := cfg.Policy == "" && cfg.EnvoyConfigDir == "" && cfg.XDSServer == ""
	switch {
	case cfg.EnvoyConfigDir != "":
		fmt.Fprintf(&b, "  policy     envoyproxy/ratelimit's files in %s (reloads on change)\n", cfg.EnvoyConfigDir)
	case cfg.XDSServer != "":
		fmt.Fprintf(&b, "  policy     from the xDS server %s as node %s (each update applied)\n", cfg.XDSServer, cfg.XDSNodeID)
	case bundled:
		b.WriteString("  policy     the bundled example (--policy limits.yaml for yours)\n")
	default:
		fmt.Fprintf(&b, "  policy     %s (reloads on SIGHUP and on change)\n", cfg.Policy)
	}
	if a := srv.HTTPAddr(); a != "" {
		if bundled {
			b.WriteString("Try it (the 4th check within 10s is denied with 429):\n")
			fmt.Fprintf(&b, "  for i in 1 2 3 4; do curl -s -w ' %%{http_code}\\n' http://%s/v1/check -d '{\"path\": [\"user\", \"alex\", \"trade\"]}'; done\n", a)
		} else if path := samplePath(srv.Policy()); path != nil {
			body, _ := json.Marshal(map[string][]string{"path": path})
			b.WriteString("Try it with a path your policy limits:\n")
			fmt.Fprintf(&b, "  curl -s -w ' %%{http_code}\\n' http://%s/v1/check -d '%s'\n", a, body)
		}
	}
	fmt.Fprint(e.stdout, b.String())
}

// samplePath returns a path that the policy limits (its first enforced
// node with limits, "*" and patterns filled with "alex"), or nil when it
// limits none.
func samplePath(p *policy.Policy) []string {
	for _, n := range p.Nodes() {
		if n.Shadow || n.Unlimited || len(n.Specs) == 0 {
			continue
		}
		path := strings.Split(n.Pattern, "/")
		for i, seg := range path {
			if strings.Contains(seg, "*") {
				path[i] = strings.ReplaceAll(seg, "*", "alex")
			}
		}
		if m := p.Match(path); !m.Unmatched && len(m.Hits) > 0 {
			return path
		}
	}
	return nil
}
