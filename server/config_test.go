package server

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/yamlfile"
)

// TestConfigErrors: a sluice.yaml's problems are reported all at once, in
// the format of a limits.yaml's (file:line:col: field: message), not the
// YAML library's "[1:1] unknown field".
func TestConfigErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	src := "htp: 127.0.0.1:1\ntimeout: soon\nqueues:\n  jobs: {capacity: many}\nredis:\n  prefx: x\non_store_error: denyy\nshutdown_delay: 1 minute\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var c Config
	err := LoadConfigFile(path, &c)
	var list yamlfile.ErrorList
	if !errors.As(err, &list) || len(list) != 6 {
		t.Fatalf("errors: %v", err)
	}
	for i, want := range []string{
		path + `:1:1: htp: unknown field "htp" (want http, grpc,`,
		path + `:2:10: timeout: time: invalid duration "soon"`,
		path + `:4:20: queues.jobs.capacity: want an integer, got "many"`,
		path + `:6:3: redis.prefx: unknown field "prefx" (want prefix,`,
		path + `:7:17: on_store_error: want one of allow, deny, got "denyy" (did you mean deny?)`,
		path + `:8:17: shutdown_delay: time: unknown unit " minute" in duration "1 minute" (write 1m)`,
	} {
		if got := list[i].Error(); !strings.HasPrefix(got, want) {
			t.Errorf("error %d: %s\nwant it to start %s", i, got, want)
		}
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := LoadConfigFile(path, &c); err != nil {
		t.Errorf("an empty file: %v", err)
	}
}

// TestConfigValidateRefuses: every setting out of its range is refused
// with the setting's name (a negative shutdown_timeout or shutdown_delay
// was taken, and cut in-flight requests or the drain short).
func TestConfigValidateRefuses(t *testing.T) {
	for _, env := range []string{"SLUICE_TIMEOUT=-1s", "SLUICE_MAX_WAITING=-5", "SLUICE_MAX_WAITING=1000001", "SLUICE_REDIS_MAX_LEASE=-1",
		"SLUICE_CONSUMERS_TTL=-1s", "SLUICE_CONSUMERS_MAX=1001", "SLUICE_SHUTDOWN_TIMEOUT=-1s", "SLUICE_SHUTDOWN_DELAY=-1s",
		"SLUICE_HEADERS=fancy", "SLUICE_ON_STORE_ERROR=maybe", "SLUICE_GRPC_REFLECTION=yes",
		"SLUICE_REDIS_GLOBAL_ALLOWANCE=-1", "SLUICE_REDIS_HOME_REPLICAS=65", "SLUICE_REDIS_HOME=redis://home:6379",
		"SLUICE_ENVOY_LIMIT_HEADER=X RateLimit", "SLUICE_ENVOY_REMAINING_HEADER=X-Remaining:", "SLUICE_ENVOY_RESET_HEADER=" + strings.Repeat("r", 257)} {
		name, value, _ := strings.Cut(env, "=")
		var c Config
		if err := ApplyEnv(&c, func(k string) string { return map[string]string{name: value}[k] }); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		field := ""
		for _, v := range EnvVars {
			if v.Name == name {
				field = v.Field
			}
		}
		if field == "" {
			t.Fatalf("%s is not in EnvVars", name)
		}
		if err := c.Defaults().Validate(); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", env, err, field)
		}
	}
}

// TestConfigFieldNamedOnce: a field of Config is named once, by its yaml
// tag. Every field of one value (but a listener's client-only TLS fields
// and forward_auth's, the file's only) has its SLUICE_* variable, named
// after it, and Set's name, and the variable sets what the same value at
// that name in a sluice.yaml sets: a field added with its yaml tag alone
// is reached by all three, and a name written twice, differently, fails.
func TestConfigFieldNamedOnce(t *testing.T) {
	fileOnly := func(name string) bool {
		return strings.HasPrefix(name, "forward_auth.") || slices.Contains([]string{"grpc_tls.server_name",
			"grpc_tls.insecure_skip_verify", "http_tls.server_name", "http_tls.insecure_skip_verify"}, name)
	}
	samples := map[string]string{} // yaml name -> a value it takes
	var walk func(typ reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			name = prefix + name
			switch oneof := f.Tag.Get("oneof"); {
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, name+".")
			case fileOnly(name):
			case oneof != "":
				samples[name], _, _ = strings.Cut(oneof, " ")
			case f.Type == reflect.TypeFor[time.Duration]():
				samples[name] = "7s"
			default:
				samples[name] = map[reflect.Kind]string{reflect.String: "x", reflect.Bool: "true", reflect.Int: "7", reflect.Int64: "7"}[f.Type.Kind()]
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	delete(samples, "queues") // a map of sections, the file's only
	if len(samples) < 40 {
		t.Fatalf("found only %d fields: %v", len(samples), samples)
	}
	for _, v := range EnvVars {
		sample, ok := samples[v.Field]
		delete(samples, v.Field)
		if !ok {
			t.Errorf("%s sets %s, which is no field of one value", v.Name, v.Field)
			continue
		}
		if want := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(v.Field, ".", "_")); v.Name != want {
			t.Errorf("%s is the variable of %s, want %s", v.Name, v.Field, want)
		}
		var fromEnv, fromFile Config
		if err := ApplyEnv(&fromEnv, func(name string) string { return map[string]string{v.Name: sample}[name] }); err != nil {
			t.Errorf("%s=%s: %v", v.Name, sample, err)
			continue
		}
		parts := strings.Split(v.Field, ".")
		var yaml strings.Builder
		for i, p := range parts {
			yaml.WriteString(strings.Repeat("  ", i) + p + ":")
			if i < len(parts)-1 {
				yaml.WriteString("\n")
			}
		}
		yaml.WriteString(" " + sample + "\n")
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, []byte(yaml.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := LoadConfigFile(path, &fromFile); err != nil {
			t.Errorf("%s: %v", yaml.String(), err)
			continue
		}
		if reflect.DeepEqual(fromEnv, Config{}) || !reflect.DeepEqual(fromEnv, fromFile) {
			t.Errorf("%s=%s sets %+v; %s in a sluice.yaml sets %+v", v.Name, sample, fromEnv, strings.TrimSpace(yaml.String()), fromFile)
		}
	}
	for name := range samples {
		t.Errorf("%s has no SLUICE_* variable", name)
	}
}
