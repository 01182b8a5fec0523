package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/server"
)

// envoyName is the name (argv[0]) under which sluice serves as
// envoyproxy/ratelimit does: `sluice serve --envoy-env`, configured by
// that service's environment variables, as Envoy Gateway's and Istio's
// deployments run its image's /bin/ratelimit.
const envoyName = "ratelimit"

// envoyVar is one of envoyproxy/ratelimit's environment variables: its
// default there, and what Sluice does with it ("" for one it honours as
// it is; else why it does not).
type envoyVar struct {
	name, def, not string
}

// envoyVars are envoyproxy/ratelimit's settings (src/settings/settings.go).
// docs/envoy-migration.md tables them; a variable set that Sluice does not
// honour is named in a warning at start.
var envoyVars = []envoyVar{
	{"HOST", "0.0.0.0", ""},
	{"PORT", "8080", ""},
	{"GRPC_HOST", "0.0.0.0", ""},
	{"GRPC_PORT", "8081", ""},
	{"DEBUG_HOST", "0.0.0.0", ""},
	{"DEBUG_PORT", "6070", ""},
	{"GRPC_UDS", "", "gRPC is served over TCP only"},
	{"GRPC_SERVER_USE_TLS", "false", ""},
	{"GRPC_SERVER_TLS_CERT", "", ""},
	{"GRPC_SERVER_TLS_KEY", "", ""},
	{"GRPC_CLIENT_TLS_CACERT", "", ""},
	{"GRPC_CLIENT_TLS_SAN", "", "any client certificate the CA signed is accepted, whatever its SAN"},
	{"GRPC_SERVER_TLS_CA_CERT", "", "envoyproxy/ratelimit does not read it either (Envoy Gateway sets it): GRPC_CLIENT_TLS_CACERT asks clients for certificates"},
	{"GRPC_MAX_CONNECTION_AGE", "24h", "connections are not aged"},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", "connections are not aged"},
	{"LOG_LEVEL", "WARN", ""},
	{"LOG_FORMAT", "text", ""},
	{"CONFIG_TYPE", "FILE", ""},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", "Sluice always starts; until its first valid configuration ShouldRateLimit answers UNAVAILABLE (no rate limit configuration loaded) and /readyz 503, as envoyproxy/ratelimit answers when it starts without one"},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", ""},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", "the node is sent without metadata"},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", ""},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", "a lost connection is made again after 0.1s, doubling to 5s"},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", "no headers are added"},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", ""},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", ""},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", ""},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", ""},
	{"RUNTIME_SUBDIRECTORY", "", ""},
	{"RUNTIME_APPDIRECTORY", "config", ""},
	{"RUNTIME_IGNOREDOTFILES", "false", ""}, // dot files are always skipped
	{"RUNTIME_WATCH_ROOT", "true", ""},
	{"REDIS_SOCKET_TYPE", "unix", ""},
	{"REDIS_TYPE", "SINGLE", ""},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", ""},
	{"REDIS_AUTH", "", ""},
	{"REDIS_TLS", "false", ""},
	{"REDIS_TLS_CLIENT_CERT", "", ""},
	{"REDIS_TLS_CLIENT_KEY", "", ""},
	{"REDIS_TLS_CACERT", "", ""},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "the certificate's name is always verified"},
	{"REDIS_POOL_SIZE", "10", "the client pipelines over its own connections"},
	{"REDIS_PIPELINE_WINDOW", "0", "the client pipelines concurrent calls by itself"},
	{"REDIS_PIPELINE_LIMIT", "0", "the client pipelines concurrent calls by itself"},
	{"REDIS_TIMEOUT", "10s", "a decision is bounded by Sluice's timeout (50ms; SLUICE_TIMEOUT)"},
	{"REDIS_PERSECOND", "false", "one Redis holds every limit"},
	{"REDIS_SENTINEL_AUTH", "", "the sentinels are reached with REDIS_AUTH"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", ""},
	{"CACHE_KEY_PREFIX", "", ""},
	{"BACKEND_TYPE", "redis", ""},
	{"USE_STATSD", "true", "metrics are Prometheus's, at /metrics"},
	{"USE_DOG_STATSD", "false", "metrics are Prometheus's, at /metrics"},
	{"USE_PROMETHEUS", "false", ""},
	{"PROMETHEUS_ADDR", ":9090", ""},
	{"PROMETHEUS_PATH", "/metrics", "metrics are at /metrics"},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", "keys expire when their state does"},
	{"NEAR_LIMIT_RATIO", "0.8", "there is no near-limit statistic"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", ""},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", ""},
	{"SHADOW_MODE", "false", ""},
	{"MERGE_DOMAIN_CONFIG", "false", "a domain is defined by one file"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", "/healthcheck answers as /readyz"},
	{"TRACING_ENABLED", "false", "no traces are exported"},
	{"TRACING_SERVICE_NAME", "RateLimit", "no traces are exported"},
	{"TRACING_SERVICE_NAMESPACE", "", "no traces are exported"},
	{"TRACING_SERVICE_INSTANCE_ID", "", "no traces are exported"},
	{"TRACING_EXPORTER_PROTOCOL", "http", "no traces are exported"},
	{"TRACING_SAMPLING_RATE", "1", "no traces are exported"},
	{"STATSD_HOST", "localhost", "metrics are Prometheus's, at /metrics"},
	{"STATSD_PORT", "8125", "metrics are Prometheus's, at /metrics"},
	{"EXTRA_TAGS", "", "metrics are Prometheus's, at /metrics"},
	{"STATS_FLUSH_INTERVAL", "10s", "metrics are Prometheus's, at /metrics"},
	{"DISABLE_STATS", "false", "metrics are Prometheus's, at /metrics"},
	{"USE_DOG_STATSD_MOGRIFIERS", "", "metrics are Prometheus's, at /metrics"},
	{"PROMETHEUS_MAPPER_YAML", "", "metrics have Sluice's names"},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", "a lost connection is made again after 0.1s, doubling to 5s"},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "a lost connection is made again after 0.1s, doubling to 5s"},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", "a lost connection is made again after 0.1s, doubling to 5s"},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", "a lost connection is made again after 0.1s, doubling to 5s"},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", "gRPC's default (4 MiB) bounds an update"},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", ""},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", ""},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", ""},
	{"QUOTA_MODE", "false", ""},
	{"RESPONSE_DYNAMIC_METADATA", "false", ""},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "the client pipelines over its own connections"},
	{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false", "/readyz and the store's metrics say when Redis is down"},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", "one Redis holds every limit"},
	{"REDIS_PERSECOND_TYPE", "SINGLE", "one Redis holds every limit"},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", "one Redis holds every limit"},
	{"REDIS_PERSECOND_POOL_SIZE", "10", "one Redis holds every limit"},
	{"REDIS_PERSECOND_AUTH", "", "one Redis holds every limit"},
	{"REDIS_PERSECOND_TLS", "false", "one Redis holds every limit"},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", "one Redis holds every limit"},
	{"REDIS_PERSECOND_PIPELINE_WINDOW", "0", "one Redis holds every limit"},
	{"REDIS_PERSECOND_PIPELINE_LIMIT", "0", "one Redis holds every limit"},
	{"REDIS_PERSECOND_TIMEOUT", "10s", "one Redis holds every limit"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "WAIT", "one Redis holds every limit"},
	{"MEMCACHE_HOST_PORT", "", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_MAX_IDLE_CONNS", "2", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_SRV", "", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_SRV_REFRESH", "0", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_TLS", "false", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_TLS_CLIENT_CERT", "", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_TLS_CLIENT_KEY", "", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_TLS_CACERT", "", "limits are kept in Redis (BACKEND_TYPE)"},
	{"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "false", "limits are kept in Redis (BACKEND_TYPE)"},
}

// applyEnvoyEnv sets cfg from envoyproxy/ratelimit's variables (getenv),
// each unset one at that service's default, and returns the variables set
// that Sluice does not honour. An error says which setting Sluice cannot
// serve at all.
func applyEnvoyEnv(cfg *server.Config, getenv func(string) string) (ignored []string, err error) {
	get := func(name string) string {
		if v := getenv(name); v != "" {
			return v
		}
		i := slices.IndexFunc(envoyVars, func(v envoyVar) bool { return v.name == name })
		return envoyVars[i].def
	}
	on := func(name string) bool { b, _ := strconv.ParseBool(get(name)); return b }
	for _, v := range envoyVars {
		// Set to other than its default, or turning a feature on (such as
		// USE_STATSD=true, the default there).
		val := getenv(v.name)
		if b, _ := strconv.ParseBool(val); v.not != "" && val != "" && (val != v.def || b) {
			ignored = append(ignored, v.name+" ("+v.not+")")
		}
	}
	cfg.HTTP = net.JoinHostPort(get("HOST"), get("PORT"))
	cfg.GRPC = net.JoinHostPort(get("GRPC_HOST"), get("GRPC_PORT"))
	cfg.AdminHTTP = net.JoinHostPort(get("DEBUG_HOST"), get("DEBUG_PORT"))
	if on("USE_PROMETHEUS") { // Prometheus scrapes its address: /metrics is served there
		cfg.AdminHTTP = get("PROMETHEUS_ADDR")
	}
	switch l := strings.ToLower(get("LOG_LEVEL")); l {
	case "trace", "debug":
		cfg.LogLevel = "debug"
	case "fatal", "panic":
		cfg.LogLevel = "error"
	default:
		cfg.LogLevel = l
	}
	cfg.LogFormat = get("LOG_FORMAT")
	if on("GRPC_SERVER_USE_TLS") {
		cfg.GRPCTLS = server.TLSConfig{CertFile: get("GRPC_SERVER_TLS_CERT"), KeyFile: get("GRPC_SERVER_TLS_KEY"), CAFile: get("GRPC_CLIENT_TLS_CACERT")}
	}
	switch t := get("CONFIG_TYPE"); strings.ToUpper(t) {
	case "FILE":
		cfg.EnvoyConfigDir = filepath.Join(get("RUNTIME_ROOT"), get("RUNTIME_SUBDIRECTORY"), get("RUNTIME_APPDIRECTORY"))
	case "GRPC_XDS_SOTW":
		cfg.XDSServer, cfg.XDSNodeID = get("CONFIG_GRPC_XDS_SERVER_URL"), get("CONFIG_GRPC_XDS_NODE_ID")
		if on("CONFIG_GRPC_XDS_SERVER_USE_TLS") {
			cfg.XDSTLS = server.TLSConfig{CAFile: get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"), CertFile: get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
				KeyFile: get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"), ServerName: get("CONFIG_GRPC_XDS_SERVER_TLS_SAN")}
		}
	default:
		return ignored, fmt.Errorf("CONFIG_TYPE=%s: want FILE or GRPC_XDS_SOTW", t)
	}
	if b := get("BACKEND_TYPE"); !strings.EqualFold(b, "redis") {
		return ignored, fmt.Errorf("BACKEND_TYPE=%s: Sluice keeps its limits in Redis (or in memory: SLUICE_STORE=memory)", b)
	}
	if cfg.Store, err = envoyRedisURL(get); err != nil {
		return ignored, err
	}
	if on("REDIS_TLS") {
		cfg.Redis.TLS = server.TLSConfig{CAFile: get("REDIS_TLS_CACERT"), CertFile: get("REDIS_TLS_CLIENT_CERT"), KeyFile: get("REDIS_TLS_CLIENT_KEY")}
	}
	cfg.Envoy = server.EnvoyConfig{ResponseHeaders: on("LIMIT_RESPONSE_HEADERS_ENABLED"),
		LimitHeader: get("LIMIT_LIMIT_HEADER"), RemainingHeader: get("LIMIT_REMAINING_HEADER"), ResetHeader: get("LIMIT_RESET_HEADER"),
		DynamicMetadata: on("RESPONSE_DYNAMIC_METADATA")}
	cfg.Envoy.QuotaMode = on("QUOTA_MODE")
	if p := get("CACHE_KEY_PREFIX"); p != "" {
		cfg.Redis.Prefix = p
	}
	if n, _ := strconv.ParseInt(get("LOCAL_CACHE_SIZE_IN_BYTES"), 10, 64); n > 0 {
		cfg.Redis.OverLimitCache = int(max(n/100, 1000)) // about 100 bytes a key
	} else {
		cfg.Redis.OverLimitCache = -1 // off, as Envoy's local cache is
	}
	if on("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT") {
		cfg.Envoy.Counts = "stop_when_over"
	}
	cfg.Envoy.ShadowMode = on("SHADOW_MODE")
	return ignored, nil
}

// envoyRedisURL is Sluice's store URL for envoyproxy/ratelimit's Redis
// settings: REDIS_URL is host:port (SINGLE), host:port,host:port,...
// (CLUSTER) or master,sentinel:port,... (SENTINEL), over TCP.
func envoyRedisURL(get func(string) string) (string, error) {
	raw := get("REDIS_URL")
	if !strings.EqualFold(get("REDIS_SOCKET_TYPE"), "tcp") {
		return "", fmt.Errorf("REDIS_SOCKET_TYPE=%s (REDIS_URL=%s): Sluice reaches Redis over TCP only: set REDIS_SOCKET_TYPE=tcp", get("REDIS_SOCKET_TYPE"), raw)
	}
	if strings.Contains(raw, "://") {
		return raw, nil
	}
	u := url.URL{Scheme: "redis", Path: "/0"}
	if b, _ := strconv.ParseBool(get("REDIS_TLS")); b {
		u.Scheme = "rediss"
	}
	if a := get("REDIS_AUTH"); a != "" {
		if user, pass, ok := strings.Cut(a, ":"); ok {
			u.User = url.UserPassword(user, pass)
		} else {
			u.User = url.UserPassword("", a)
		}
	}
	parts := strings.Split(raw, ",")
	q := url.Values{}
	switch t := strings.ToUpper(get("REDIS_TYPE")); t {
	case "SINGLE":
		if len(parts) != 1 {
			return "", fmt.Errorf("REDIS_URL=%s: one host:port for REDIS_TYPE=SINGLE", raw)
		}
	case "CLUSTER":
		for _, p := range parts[1:] {
			q.Add("addr", p)
		}
	case "SENTINEL":
		if len(parts) < 2 {
			return "", fmt.Errorf("REDIS_URL=%s: want master,sentinel:port,... for REDIS_TYPE=SENTINEL", raw)
		}
		q.Set("master_set", parts[0])
		parts = parts[1:]
		for _, p := range parts[1:] {
			q.Add("addr", p)
		}
	default:
		return "", fmt.Errorf("REDIS_TYPE=%s: want SINGLE, CLUSTER or SENTINEL", t)
	}
	u.Host, u.RawQuery = parts[0], q.Encode()
	return u.String(), nil
}

// isEnvoyName reports whether this binary was started as envoyproxy's
// ratelimit (its image's /bin/ratelimit).
func isEnvoyName() bool { return filepath.Base(os.Args[0]) == envoyName }
