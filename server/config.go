package server

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/yamlfile"
	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/store"
)

// Config configures a Server. The zero value of a field means its default
// (see Defaults). `sluice serve` builds it from, in increasing priority, the
// --config file (sluice.yaml, whose fields are the yaml names below), the
// SLUICE_* environment variables (see ApplyEnv) and the command-line flags.
type Config struct {
	// HTTP is the listen address of the HTTP/JSON API, metrics, health and
	// admin endpoints ("off" disables it).
	HTTP string `yaml:"http" default:"127.0.0.1:8080"`
	// GRPC is the listen address of the Envoy rate limit service and the
	// gRPC health service ("off" disables it).
	GRPC string `yaml:"grpc" default:"127.0.0.1:8081"`
	// GRPCReflection is "on" (the default) to serve gRPC server reflection
	// on the gRPC listener, so that grpcurl and grpcui list and call its
	// services by name with no proto files, or "off".
	GRPCReflection string `yaml:"grpc_reflection" oneof:"on off" default:"on"`
	// Store is "memory" or a redis:// or rediss:// URL: one server, a
	// Cluster seed list (?addr=host:port&addr=...) or Sentinel
	// (?master_set=name). Default memory.
	Store string `yaml:"store" default:"memory"`
	// Policy is the limits.yaml file; empty means the bundled example
	// (PolicyData).
	Policy string `yaml:"policy"`
	// EnvoyConfigDir, instead of Policy, serves envoyproxy/ratelimit's
	// configuration as it is: the directory's *.yaml files, one domain
	// each, with Envoy's meaning (as import-envoy converts them), reloaded
	// when they change (a ConfigMap's symlink swap too).
	EnvoyConfigDir string `yaml:"envoy_config_dir"`
	// XDSServer, instead of Policy, takes the policy from an xDS
	// management server (host:port; state of the world over ADS, Envoy's
	// RateLimitConfig resources, as Envoy Gateway serves them), each
	// update applied as a reload and a bad one refused (NACK). XDSNodeID
	// is this instance's node id there (default "sluice").
	XDSServer string `yaml:"xds_server"`
	XDSNodeID string `yaml:"xds_node_id"`
	// XDSTLS, when set, connects to the xDS server over TLS: CAFile
	// verifies it, CertFile and KeyFile are this instance's certificate
	// (mutual TLS, as Envoy Gateway asks), ServerName the name checked.
	XDSTLS TLSConfig `yaml:"xds_tls"`
	// Envoy holds envoyproxy/ratelimit's switches of its answers, for a
	// service that serves Envoy's configuration (EnvoyConfigDir,
	// XDSServer): there ShouldRateLimit answers as envoyproxy/ratelimit does.
	Envoy EnvoyConfig `yaml:"envoy"`
	// PolicyData is the policy used when Policy is empty, and PolicyName
	// the name its errors carry.
	PolicyData []byte `yaml:"-"`
	PolicyName string `yaml:"-"`
	// Timeout bounds each decision, store round trip included. Default
	// 50ms.
	Timeout time.Duration `yaml:"timeout" default:"50ms"`
	// OnStoreError is what a check answers when the store fails or times
	// out: "allow" (fail open, the default) or "deny" (fail closed).
	OnStoreError string `yaml:"on_store_error" oneof:"allow deny" default:"allow"`
	// RequireStore makes New fail when the store cannot be reached, for a
	// deployment that prefers a crash loop to answering by OnStoreError
	// until it can. By default the service starts and connects when it
	// can.
	RequireStore bool `yaml:"require_store"`
	// GRPCTLS serves gRPC over TLS, mutual with ca_file; HTTPTLS
	// the HTTP listener. Both reread their files when they change.
	// They take cert_file, key_file and ca_file (the clients' CA).
	GRPCTLS TLSConfig `yaml:"grpc_tls" env:"server"`
	HTTPTLS TLSConfig `yaml:"http_tls" env:"server"`
	// Headers are the rate-limit fields of HTTP answers (checks,
	// forward-auth): draft (the IETF RateLimit-Policy and RateLimit, the
	// default), legacy (X-RateLimit-Limit, -Remaining and -Reset, for
	// clients that read those), or both.
	Headers string `yaml:"headers" oneof:"draft legacy both" default:"draft"`
	// AdminToken is the bearer token of the /admin/ endpoints. Empty
	// disables them: they answer 404. AdminTokenFile, if set, is read for it
	// (trailing white space trimmed).
	AdminToken     string `yaml:"admin_token"`
	AdminTokenFile string `yaml:"admin_token_file"`
	// Redis configures the connection when Store is a Redis URL.
	Redis RedisConfig `yaml:"redis"`
	// Consumers configures the per-key lists of recent consumers' meta.
	Consumers ConsumersConfig `yaml:"consumers"`
	// Queues are the admission queues served at POST /v1/queues/{name},
	// by name; requests for other names get 404.
	Queues map[string]QueueConfig `yaml:"queues"`
	// MaxWaiting bounds the requests held at once for a policy's delay
	// (gRPC and forward-auth wait before they answer); beyond it a
	// delayed request is refused at once. Default 10000, at most 1000000.
	MaxWaiting int `yaml:"max_waiting"`
	// ForwardAuth maps the requests that nginx, Traefik and Caddy ask
	// about to policy paths (see ForwardAuthConfig).
	ForwardAuth ForwardAuthConfig `yaml:"forward_auth" env:"-"`
	// WatchInterval is how often the policy file's contents, modification
	// time and size are polled for a reload; negative disables polling
	// (SIGHUP still reloads). Default 1s.
	WatchInterval time.Duration `yaml:"watch_interval" default:"1s"`
	// ShutdownTimeout bounds the wait for in-flight requests on SIGTERM.
	// Default 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" default:"10s"`
	// ShutdownDelay is how long, after SIGTERM, the service goes on
	// serving while /readyz answers 503 and the gRPC health service
	// NOT_SERVING, so that a load balancer stops sending to it before its
	// listeners close. Default 0.
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
	// AdminHTTP, when set, is a listen address that serves the /admin/
	// endpoints, which the HTTP listener then does not; metrics and health
	// answer on both (probes and scrapes keep their port). Empty (the
	// default) serves /admin/ on the HTTP listener.
	AdminHTTP string `yaml:"admin_http"`
	// LogLevel is debug, info (default), warn or error; LogFormat is text
	// (default) or json.
	LogLevel  string `yaml:"log_level" oneof:"debug info warn error" default:"info"`
	LogFormat string `yaml:"log_format" oneof:"text json" default:"text"`
}

// RedisConfig is how to reach Redis beyond what the URL says.
type RedisConfig struct {
	// Prefix of every key (default "sluice:").
	Prefix string `yaml:"prefix"`
	// Username and Password override the URL's.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// MaxFlushDelay lets the client gather concurrent commands into one
	// write for up to this long (default 20µs; negative disables): fewer
	// system calls, for the service and for Redis, at a small cost in
	// latency.
	MaxFlushDelay time.Duration `yaml:"max_flush_delay" default:"20µs"`
	// OverLimitCache is how many keys' denials the exact over-limit cache
	// keeps (default 100000; negative disables): a key denied by Redis is
	// denied again without a round trip until its retry-after
	// (store/redis/overlimit.go). An admin reset and a policy reload clear it;
	// a reset made by another instance is seen here when the cached
	// denial expires.
	OverLimitCache int `yaml:"over_limit_cache" default:"100000"`
	// LeaseFor is how long a lease of quota lives, for the policy nodes
	// that say lease: true (default 1s; negative turns leases off):
	// a hot key's checks are then admitted from units taken ahead, at
	// most MaxLease at a time per key (default 10000). See store/redis.
	LeaseFor time.Duration `yaml:"lease_for" default:"1s"`
	MaxLease int64         `yaml:"max_lease"`
	// Home is the URL of the home of global limits (policy nodes that say
	// global: true), when this service's store is one region's: each
	// region spends a share charged at Home first. GlobalAllowance is what
	// a region cut off from Home admits once its share is spent, per
	// window (default 0: it denies); HomeReplicas the replicas of Home a
	// charge waits for (WAIT), so that Home's failover loses none.
	// docs/multi-region.md.
	Home            string `yaml:"home"`
	GlobalAllowance int64  `yaml:"global_allowance"`
	HomeReplicas    int    `yaml:"home_replicas"`
	// TLS: CAFile verifies the server (system roots when empty); CertFile
	// and KeyFile are a client certificate; ServerName overrides the name
	// checked; InsecureSkipVerify disables verification (tests only).
	// Setting any of them turns TLS on, as does a rediss:// URL.
	TLS TLSConfig `yaml:"tls"`
}

// EnvoyConfig is what envoyproxy/ratelimit's variables say of how it
// counts and answers, for a service that serves Envoy's configuration.
type EnvoyConfig struct {
	// Counts is how a served Envoy configuration counts, the policy's
	// counts: each (the default), every descriptor's hits on its own,
	// admitted or denied, as envoyproxy/ratelimit counts; stop_when_over,
	// as it counts with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true; or
	// all_or_nothing, Sluice's own rules: a request counts on every
	// descriptor or on none, and a denied one costs nothing
	// (docs/envoy-migration.md).
	Counts string `yaml:"counts" oneof:"each stop_when_over all_or_nothing" default:"each"`
	// ShadowMode (SHADOW_MODE) answers every ShouldRateLimit (gRPC, POST
	// /json) OK overall, each descriptor's status as decided.
	ShadowMode bool `yaml:"shadow_mode"`
	// QuotaMode (QUOTA_MODE) puts every descriptor in quota mode: none
	// denies, and one over its limit is answered OK, over quota
	// (policy.PathQuery.QuotaMode).
	QuotaMode bool `yaml:"quota_mode"`
	// ResponseHeaders (LIMIT_RESPONSE_HEADERS_ENABLED) adds to each answer
	// the limit, remaining and reset (seconds) of the descriptor nearest
	// its limit (an over-limit one first), in the headers LimitHeader,
	// RemainingHeader and ResetHeader (LIMIT_LIMIT_HEADER, ...). Off, the
	// answer adds no header, as envoyproxy/ratelimit's does.
	ResponseHeaders bool   `yaml:"response_headers"`
	LimitHeader     string `yaml:"limit_header" default:"RateLimit-Limit"`
	RemainingHeader string `yaml:"remaining_header" default:"RateLimit-Remaining"`
	ResetHeader     string `yaml:"reset_header" default:"RateLimit-Reset"`
	// DynamicMetadata (RESPONSE_DYNAMIC_METADATA) sets each answer's
	// dynamic_metadata as envoyproxy/ratelimit sets it: the request's
	// domain, descriptors and hits_addend, and its quota_mode descriptors.
	DynamicMetadata bool `yaml:"dynamic_metadata"`
}

// TLSConfig names the files of one side of a TLS connection: its
// certificate and key (CertFile, KeyFile), and the CA that verifies the
// other side (CAFile: a client's CA that signs the servers it trusts, a
// server's the client certificates it asks for). ServerName and
// InsecureSkipVerify are a client's only.
type TLSConfig struct {
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name" env:"client"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" env:"client"`
}

func (t TLSConfig) enabled() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify
}

// ConsumersConfig sizes the consumers lists.
type ConsumersConfig struct {
	// Max is how many entries a key's list keeps (default 20; negative
	// disables recording).
	Max int `yaml:"max" default:"20"`
	// TTL is how long a list lives after its last entry (default 1h).
	TTL time.Duration `yaml:"ttl" default:"1h"`
}

// defaultQueueCapacity is a queue's capacity when its config gives none;
// Config's other defaults are in its fields' tags (default:"...").
const defaultQueueCapacity = 1000

// Defaults returns c with every unset field at its default.
func (c Config) Defaults() Config {
	v := reflect.ValueOf(&c).Elem()
	for _, s := range settings {
		if s.def != "" && v.FieldByIndex(s.index).IsZero() {
			if err := c.Set(s.name, s.def); err != nil {
				panic(fmt.Sprintf("config: %s's default: %v", s.name, err))
			}
		}
	}
	if c.XDSServer != "" && c.XDSNodeID == "" {
		c.XDSNodeID = "sluice"
	}
	if c.MaxWaiting == 0 {
		c.MaxWaiting = defaultMaxWaiting
	}
	for name, q := range c.Queues {
		if q.Capacity == 0 {
			q.Capacity = defaultQueueCapacity
			c.Queues[name] = q
		}
	}
	return c
}

// Validate reports the first problem with a defaulted config.
func (c Config) Validate() error {
	switch {
	case c.HTTP == "off" && c.GRPC == "off":
		return errors.New("config: http and grpc are both off: nothing to serve")
	case c.Policy != "" && c.EnvoyConfigDir != "" || c.XDSServer != "" && (c.Policy != "" || c.EnvoyConfigDir != ""):
		return errors.New("config: give one of policy (a limits.yaml), envoy_config_dir (envoyproxy/ratelimit's files) and xds_server (its xDS), not several")
	case c.Timeout <= 0:
		return fmt.Errorf("config: timeout must be positive, got %v", time.Duration(c.Timeout))
	case c.GRPCReflection != "on" && c.GRPCReflection != "off":
		return fmt.Errorf("config: grpc_reflection must be on or off, got %q", c.GRPCReflection)
	case c.OnStoreError != "allow" && c.OnStoreError != "deny":
		return fmt.Errorf("config: on_store_error must be allow or deny, got %q", c.OnStoreError)
	case c.ShutdownTimeout < 0 || c.ShutdownDelay < 0:
		return fmt.Errorf("config: shutdown_timeout and shutdown_delay must not be negative, got %v and %v", c.ShutdownTimeout, c.ShutdownDelay)
	case c.Consumers.TTL <= 0:
		return fmt.Errorf("config: consumers.ttl must be positive, got %v", time.Duration(c.Consumers.TTL))
	case c.Consumers.Max > 1000:
		return fmt.Errorf("config: consumers.max is at most 1000, got %d", c.Consumers.Max)
	case c.MaxWaiting < 0 || c.MaxWaiting > 1_000_000:
		return fmt.Errorf("config: max_waiting must be 0 to 1000000, got %d", c.MaxWaiting)
	case c.Redis.MaxLease < 0:
		return fmt.Errorf("config: redis.max_lease must be positive, got %d", c.Redis.MaxLease)
	case c.Redis.GlobalAllowance < 0 || c.Redis.GlobalAllowance > algo.MaxCount || c.Redis.HomeReplicas < 0 || c.Redis.HomeReplicas > 64:
		return fmt.Errorf("config: redis.global_allowance must be 0 to %d and redis.home_replicas 0 to 64, got %d and %d", algo.MaxCount, c.Redis.GlobalAllowance, c.Redis.HomeReplicas)
	case c.Redis.Home != "" && !strings.HasPrefix(c.Store, "redis"):
		return fmt.Errorf("config: redis.home is the home of a region's Redis store, and the store is %q", store.Redact(c.Store))
	case c.Headers != "draft" && c.Headers != "legacy" && c.Headers != "both":
		return fmt.Errorf("config: headers must be draft, legacy or both, got %q", c.Headers)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("config: log_format must be text or json, got %q", c.LogFormat)
	}
	for _, h := range [...][2]string{{"limit_header", c.Envoy.LimitHeader}, {"remaining_header", c.Envoy.RemainingHeader}, {"reset_header", c.Envoy.ResetHeader}} {
		if !httpguts.ValidHeaderFieldName(h[1]) || len(h[1]) > maxHeaderName {
			return fmt.Errorf("config: envoy.%s must be a header name of 1 to %d letters, digits and !#$%%&'*+-.^_`|~, got %q", h[0], maxHeaderName, h[1])
		}
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	for name, q := range c.Queues {
		if name == "" || len(name) > queue.MaxNameBytes {
			return fmt.Errorf("config: queues: name %q must have 1 to %d bytes", name, queue.MaxNameBytes)
		}
		if q.Capacity < 0 {
			return fmt.Errorf("config: queues.%s.capacity must be positive, got %d", name, q.Capacity)
		}
	}
	return nil
}

// maxHeaderName bounds the names of envoy's response headers.
const maxHeaderName = 256

// servesEnvoy reports whether the service serves envoyproxy/ratelimit's
// configuration, and so answers ShouldRateLimit as it does.
func (c Config) servesEnvoy() bool { return c.EnvoyConfigDir != "" || c.XDSServer != "" }

// LoadConfigFile reads a sluice.yaml into c. Unknown fields are errors,
// and every problem is reported as a yamlfile.ErrorList, in the format of a
// limits.yaml's: "file:line:col: field: message".
func LoadConfigFile(path string, c *Config) error {
	data, err := yamlfile.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return yamlfile.Decode(path, data, c)
}

// A setting is a field of Config that Set, its SLUICE_* variable and a
// serve flag reach, named once: by its yaml tag, dotted below its
// section's ("redis.tls.ca_file").
type setting struct {
	name, def string // def: its default (default:"..."), if it has one
	index     []int  // the field, for reflect.Value.FieldByIndex
}

// settings are Config's fields of one value each (text, number, duration,
// true or false), as declared. A section tagged env:"-" is the file's
// only, and a listener's TLS (env:"server") has no field that only a
// client has (env:"client").
var settings = settingsOf(reflect.TypeFor[Config](), "", nil, "")

func settingsOf(t reflect.Type, prefix string, index []int, section string) (out []setting) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		env := f.Tag.Get("env")
		if name == "" || name == "-" || env == "-" || env == "client" && section == "server" {
			continue
		}
		at := append(slices.Clip(index), i)
		switch f.Type.Kind() {
		case reflect.Struct:
			out = append(out, settingsOf(f.Type, prefix+name+".", at, env)...)
		case reflect.String, reflect.Bool, reflect.Int, reflect.Int64:
			out = append(out, setting{prefix + name, f.Tag.Get("default"), at})
		}
	}
	return out
}

// EnvVars lists the environment variables ApplyEnv reads, each with the
// Config field it sets: SLUICE_ and the field's yaml name in upper case,
// "_" for ".".
var EnvVars = func() []struct{ Name, Field string } {
	vars := make([]struct{ Name, Field string }, len(settings))
	for i, s := range settings {
		vars[i].Name, vars[i].Field = "SLUICE_"+strings.ToUpper(strings.ReplaceAll(s.name, ".", "_")), s.name
	}
	return vars
}()

// ApplyEnv sets the fields of c named by the SLUICE_* variables that
// getenv returns non-empty (see EnvVars).
func ApplyEnv(c *Config, getenv func(string) string) error {
	for _, v := range EnvVars {
		s := getenv(v.Name)
		if s == "" {
			continue
		}
		if err := c.Set(v.Field, s); err != nil {
			return fmt.Errorf("%s: %w", v.Name, err)
		}
	}
	return nil
}

// Set sets the field of c with the given yaml name (dotted for nested
// fields, as in EnvVars) from its text form.
func (c *Config) Set(field, s string) error {
	i := slices.IndexFunc(settings, func(st setting) bool { return st.name == field })
	if i < 0 {
		return fmt.Errorf("unknown config field %q", field)
	}
	v := reflect.ValueOf(c).Elem().FieldByIndex(settings[i].index)
	switch {
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", s)
		}
		v.SetBool(b)
	case v.Type() == reflect.TypeFor[time.Duration]():
		d, err := yamlfile.ParseDuration(s)
		if err != nil {
			return err
		}
		v.SetInt(int64(d))
	default:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("want an integer, got %q", s)
		}
		v.SetInt(n)
	}
	return nil
}

// adminToken returns the admin token, reading AdminTokenFile if set.
func (c Config) adminToken() (string, error) {
	if c.AdminTokenFile == "" {
		return c.AdminToken, nil
	}
	b, err := os.ReadFile(c.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("config: admin_token_file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("config: admin_token_file %s is empty", c.AdminTokenFile)
	}
	return t, nil
}
