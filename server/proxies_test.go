package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/proxytest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The proxy tests run the configurations of docs/proxies, which
// docs/proxies/README.md shows, with only their addresses replaced by free ones: Sluice with
// sluice.yaml and limits.yaml, in front of it a real nginx or caddy, and
// behind the proxy a small upstream. They check what a client sees.

const proxiesDir = "../docs/proxies"

// Addresses written in docs/proxies, which the tests replace.
const (
	docProxyAddr    = "127.0.0.1:8000"
	docSluiceAddr   = "127.0.0.1:8080"
	docUpstreamAddr = "127.0.0.1:9000"
)

// startProxied starts Sluice with docs/proxies/sluice.yaml on a free port
// and an upstream that answers "upstream", and returns the config of the
// named proxy with its addresses replaced, and the proxy's address.
func startProxied(t *testing.T, confName string, edit func(*Config)) (conf, proxyAddr, sluiceAddr string) {
	t.Helper()
	var cfg Config
	if err := LoadConfigFile(filepath.Join(proxiesDir, "sluice.yaml"), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.HTTP = "127.0.0.1:0"
	cfg.Policy = filepath.Join(proxiesDir, cfg.Policy)
	if edit != nil {
		edit(&cfg)
	}
	s := serveForTest(t, cfg)

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "upstream")
	}))
	t.Cleanup(up.Close)

	data, err := os.ReadFile(filepath.Join(proxiesDir, confName))
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr = proxytest.FreeAddr(t)
	conf = strings.NewReplacer(docProxyAddr, proxyAddr, docSluiceAddr, s.HTTPAddr(), docUpstreamAddr, up.Listener.Addr().String()).Replace(string(data))
	if conf == string(data) {
		t.Fatalf("%s names none of the addresses the test replaces", confName)
	}
	return conf, proxyAddr, s.HTTPAddr()
}

// serveForTest serves cfg on its listeners until the test ends.
func serveForTest(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = testTimeout
	}
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done; s.Close() })
	return s
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip (127.0.0.0/8 is all loopback), so that each test client has
// an address of its own, none of them the proxy's 127.0.0.1.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

type sent struct {
	status int
	body   string
	h      http.Header
}

func send(t *testing.T, c *http.Client, method, url string, hdr map[string]string) sent {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return sent{resp.StatusCode, string(b), resp.Header}
}

// checkClientView runs what every proxy must show its clients, through
// the proxy at addr.
func checkClientView(t *testing.T, proxy *proxytest.Process) {
	base := "http://" + proxy.Addr
	a, b, c := clientFrom("127.0.0.2"), clientFrom("127.0.0.3"), clientFrom("127.0.0.4")

	// By client IP: 5 at once, then 429 with the fields and Retry-After.
	for i := range 5 {
		got := send(t, a, "GET", base+"/page", nil)
		if got.status != 200 || got.body != "upstream" {
			t.Fatalf("request %d: %d %q, want 200 from the upstream\n%s", i+1, got.status, got.body, proxy.Output())
		}
		if !strings.Contains(got.h.Get("RateLimit"), ";r=") || !strings.Contains(got.h.Get("RateLimit-Policy"), ";q=") {
			t.Errorf("request %d: allowed without the RateLimit fields: %v", i+1, got.h)
		}
	}
	got := send(t, a, "GET", base+"/page", nil)
	if got.status != 429 || got.body == "upstream" {
		t.Fatalf("6th request: %d %q, want 429", got.status, got.body)
	}
	if got.h.Get("Retry-After") == "" || !strings.Contains(got.h.Get("RateLimit"), ";r=0") || got.h.Get("RateLimit-Policy") == "" {
		t.Errorf("429 without Retry-After or RateLimit fields: %v", got.h)
	}

	// Another client is unaffected.
	if got := send(t, b, "GET", base+"/page", nil); got.status != 200 {
		t.Errorf("another client: %d, want 200", got.status)
	}
	// A forged X-Forwarded-For names neither the client's key nor another's:
	// client c claiming a's address is counted as itself, and a claiming
	// another address is still refused.
	if got := send(t, c, "GET", base+"/page", map[string]string{"X-Forwarded-For": "127.0.0.2"}); got.status != 200 {
		t.Errorf("a client forging X-Forwarded-For: %d, want 200 (its own key)", got.status)
	}
	if got := send(t, a, "GET", base+"/page", map[string]string{"X-Forwarded-For": "10.9.9.9"}); got.status != 429 {
		t.Errorf("a limited client forging X-Forwarded-For: %d, want 429", got.status)
	}

	// A deny list is a 403, through every proxy.
	if got := send(t, clientFrom("127.0.0.66"), "GET", base+"/page", nil); got.status != 403 || got.body == "upstream" {
		t.Errorf("a deny-listed client: %d %q, want 403", got.status, got.body)
	}

	// By API key, under a tenant: a key of its own, and a header past the
	// stated bound is a 431, not a way around the limit.
	for i := range 5 {
		if got := send(t, b, "GET", base+"/api/acme/orders", map[string]string{"X-Api-Key": "k1"}); got.status != 200 {
			t.Fatalf("api request %d: %d, want 200", i+1, got.status)
		}
	}
	if got := send(t, c, "GET", base+"/api/acme/orders", map[string]string{"X-Api-Key": "k1"}); got.status != 429 {
		t.Errorf("the 6th request of key k1 from another client: %d, want 429", got.status)
	}
	if got := send(t, b, "GET", base+"/api/acme/orders", map[string]string{"X-Api-Key": strings.Repeat("k", 300)}); got.status != 431 {
		t.Errorf("a 300-byte API key: %d, want 431", got.status)
	}
	// Without a key the tenant's route refuses (missing: deny, its
	// default): a missing key is never unlimited.
	if got := send(t, clientFrom("127.0.0.6"), "GET", base+"/api/acme/orders", nil); got.status != 403 || got.body == "upstream" {
		t.Errorf("an API request without X-Api-Key: %d %q, want 403", got.status, got.body)
	}

	// Login: POST only, 3 per client.
	for i := range 3 {
		if got := send(t, b, "POST", base+"/login", nil); got.status != 200 {
			t.Fatalf("login %d: %d, want 200", i+1, got.status)
		}
	}
	if got := send(t, b, "POST", base+"/login", nil); got.status != 429 {
		t.Errorf("4th login: %d, want 429", got.status)
	}
	// A client's own copy of each header a proxy endpoint reads, alone and
	// all at once, changes nothing: the login is still its 5th.
	forged := map[string]string{
		"X-Forwarded-Uri": "/page", "X-Original-Uri": "/page", "X-Forwarded-Method": "GET", "X-Original-Method": "GET",
		"X-Forwarded-Host": "forged.example", "X-Forwarded-For": "10.9.9.9", "Forwarded": "for=10.9.9.9",
	}
	for k, v := range forged {
		if got := send(t, b, "POST", base+"/login", map[string]string{k: v}); got.status != 429 {
			t.Errorf("a 5th login with a forged %s: %d, want 429", k, got.status)
		}
	}
	if got := send(t, b, "POST", base+"/login", forged); got.status != 429 {
		t.Errorf("a 5th login with every header forged: %d, want 429", got.status)
	}
	// Nor does another spelling of the login's path.
	for _, p := range []string{"/LOGIN", "/login;jsessionid=x", "/Login/"} {
		if got := send(t, b, "POST", base+p, nil); got.status != 429 {
			t.Errorf("POST %s after the login limit: %d, want 429", p, got.status)
		}
	}

	// Hostile sizes: a 64 KiB URI and a 64 KiB header get a 4xx, from the
	// proxy or from Sluice, never a 5xx.
	for name, h := range map[string]map[string]string{"URI": nil, "header": {"X-Junk": strings.Repeat("j", 64<<10)}} {
		url := base + "/page"
		if name == "URI" {
			url = base + "/" + strings.Repeat("u", 64<<10)
		}
		if got := send(t, clientFrom("127.0.0.5"), "GET", url, h); got.status < 400 || got.status >= 500 {
			t.Errorf("a 64 KiB %s: %d, want a 4xx", name, got.status)
		}
	}
}

// TestNginxForwardAuth runs Debian's nginx with docs/proxies/nginx.conf.
func TestNginxForwardAuth(t *testing.T) {
	conf, addr, _ := startProxied(t, "nginx.conf", nil)
	checkClientView(t, proxytest.Nginx(t, conf, addr))
}

// TestCaddyForwardAuth runs Debian's caddy with docs/proxies/Caddyfile.
func TestCaddyForwardAuth(t *testing.T) {
	conf, addr, _ := startProxied(t, "Caddyfile", nil)
	checkClientView(t, proxytest.Caddy(t, conf, addr))
}

// TestTraefikForwardAuthHeaders asks the endpoint as Traefik's
// ForwardAuth middleware does (Traefik is not packaged for Debian): a GET
// to the address of docs/proxies/traefik.yml carrying the proxied
// request in the X-Forwarded-* headers Traefik documents, the client's
// address last in X-Forwarded-For. Traefik hands any non-2xx answer to the
// client as it is.
func TestTraefikForwardAuthHeaders(t *testing.T) {
	conf, _, sluiceAddr := startProxied(t, "traefik.yml", nil)
	url := ""
	for _, line := range strings.Split(conf, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "address: "); ok {
			url = strings.Trim(v, `"`)
		}
	}
	if !strings.HasPrefix(url, "http://"+sluiceAddr+"/v1/forward-auth") {
		t.Fatalf("traefik.yml's forwardAuth address is %q", url)
	}
	c := clientFrom("127.0.0.1") // Traefik, a trusted proxy
	traefik := func(method, uri, client string, extra map[string]string) sent {
		h := map[string]string{
			"X-Forwarded-Method": method, "X-Forwarded-Proto": "https", "X-Forwarded-Host": "shop.example",
			"X-Forwarded-Uri": uri, "X-Forwarded-For": client,
		}
		for k, v := range extra {
			h[k] = v
		}
		return send(t, c, "GET", url, h)
	}
	for i := range 3 {
		if got := traefik("POST", "/login?next=/cart", "203.0.113.7", nil); got.status != 200 || got.h.Get("RateLimit") == "" {
			t.Fatalf("login %d: %d %v, want 200 with the RateLimit fields", i+1, got.status, got.h)
		}
	}
	got := traefik("POST", "/login", "203.0.113.7", nil)
	if got.status != 429 || got.h.Get("Retry-After") == "" || !strings.Contains(got.h.Get("RateLimit"), `"web/login/*";r=0`) {
		t.Errorf("4th login: %d %v, want 429 with Retry-After and the fields", got.status, got.h)
	}
	// Traefik replaces a client's X-Forwarded-* and passes on its other
	// headers: a client's copy of nginx's headers or of Forwarded changes
	// nothing here.
	for _, k := range []string{"X-Original-Uri", "X-Original-Method", "Forwarded"} {
		v := map[string]string{"X-Original-Uri": "/page", "X-Original-Method": "GET", "Forwarded": "for=10.9.9.9"}[k]
		if got := traefik("POST", "/login", "203.0.113.7", map[string]string{k: v}); got.status != 429 {
			t.Errorf("a 5th login with a forged %s: %d, want 429", k, got.status)
		}
	}
	// Without its proxy's headers the endpoint decides nothing: nginx's
	// headers at Traefik's endpoint are a 400, not a login.
	if got := send(t, c, "GET", url, map[string]string{"X-Original-Uri": "/login", "X-Original-Method": "POST", "X-Forwarded-For": "203.0.113.9"}); got.status != 400 {
		t.Errorf("nginx's headers at /v1/forward-auth: %d %s, want 400", got.status, got.body)
	}
	// The method matters (the route is POST only), so does the client.
	if got := traefik("GET", "/login", "203.0.113.7", nil); got.status != 200 || !strings.Contains(got.h.Get("RateLimit"), "web/client/") {
		t.Errorf("GET /login: %d %v, want 200 on the client route", got.status, got.h)
	}
	if got := traefik("POST", "/login", "203.0.113.8", nil); got.status != 200 {
		t.Errorf("another client's login: %d, want 200", got.status)
	}
	// The path is cleaned before it is matched: /static/../login is /login.
	if got := traefik("POST", "/static/../login", "203.0.113.7", nil); got.status != 429 {
		t.Errorf("POST /static/../login: %d, want 429 (it is /login)", got.status)
	}
	if got := traefik("POST", "/%6Cogin", "203.0.113.7", nil); got.status != 429 {
		t.Errorf("POST /%%6Cogin: %d, want 429 (it is /login)", got.status)
	}
	// Bounds: a URI over maxForwardURI is 414, a bad escape 400, a long
	// method 400; headers past maxHeaderBytes are net/http's 431.
	for _, tc := range []struct {
		name, method, uri string
		extra             map[string]string
		want              int
	}{
		{"a 9 KiB URI", "GET", "/" + strings.Repeat("u", 9<<10), nil, 414},
		{"a bad escape", "GET", "/a%zz", nil, 400},
		{"a 33-byte method", strings.Repeat("M", 33), "/", nil, 400},
		{"a wildcard with a control character", "GET", "/api/a%01b/orders", map[string]string{"X-Api-Key": "k"}, 400},
		{"a wildcard of invalid UTF-8", "GET", "/api/%ff/orders", map[string]string{"X-Api-Key": "k"}, 400},
		{"40 KiB of headers", "GET", "/", map[string]string{"X-Junk": strings.Repeat("j", 40<<10)}, 431},
	} {
		if got := traefik(tc.method, tc.uri, "203.0.113.9", tc.extra); got.status != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, got.status, got.body, tc.want)
		}
	}
}

// TestForwardAuthStoreDown kills the Redis the service uses: the endpoint
// then answers as on_store_error says, and at the nginx endpoint a
// refusal is nginx_deny_status with Sluice-Status 503.
func TestForwardAuthStoreDown(t *testing.T) {
	for _, onErr := range []string{"allow", "deny"} {
		t.Run(onErr, func(t *testing.T) {
			r := redistest.Start(t)
			_, _, sluiceAddr := startProxied(t, "nginx.conf", func(c *Config) {
				c.Store, c.OnStoreError = r.URL(), onErr
			})
			c := clientFrom("127.0.0.1")
			ask := func(path string) sent {
				return send(t, c, "GET", "http://"+sluiceAddr+path, map[string]string{"X-Forwarded-Uri": "/page", "X-Forwarded-Method": "GET", "X-Original-Uri": "/page", "X-Original-Method": "GET", "X-Forwarded-For": "203.0.113.7"})
			}
			if got := ask("/v1/forward-auth"); got.status != 200 {
				t.Fatalf("with Redis up: %d, want 200", got.status)
			}
			r.Stop()
			plain, nginx := ask("/v1/forward-auth"), ask("/v1/forward-auth/nginx")
			if onErr == "allow" {
				if plain.status != 200 || nginx.status != 200 {
					t.Errorf("store down, allow: %d and %d (nginx), want 200", plain.status, nginx.status)
				}
				return
			}
			if plain.status != 503 || plain.h.Get("Retry-After") != "1" {
				t.Errorf("store down, deny: %d %v, want 503 with Retry-After: 1", plain.status, plain.h)
			}
			if nginx.status != 403 || nginx.h.Get("Sluice-Status") != "503" {
				t.Errorf("store down, deny, nginx: %d %v, want 403 with Sluice-Status: 503", nginx.status, nginx.h)
			}
		})
	}
}

// TestReadmeShowsProxyConfigs: docs/proxies/README.md shows each file of
// docs/proxies that the proxy tests run, whole, in a code block.
func TestReadmeShowsProxyConfigs(t *testing.T) {
	readme, err := os.ReadFile("../docs/proxies/README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sluice.yaml", "nginx.conf", "Caddyfile", "traefik.yml"} {
		data, err := os.ReadFile(filepath.Join(proxiesDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), "\n"+string(data)+"```\n") {
			t.Errorf("docs/proxies/README.md does not show docs/proxies/%s as it is", name)
		}
	}
}

// TestForwardAuthSeveralPaths: a route with paths (per client IP and per
// API key) decides both together, through the real nginx and Caddy of
// docs/proxies, on Redis: a request its key's limit denies spends nothing
// of its IP's budget, as the IP's count read back from Redis shows.
func TestForwardAuthSeveralPaths(t *testing.T) {
	for _, proxy := range []string{"nginx.conf", "Caddyfile"} {
		t.Run(proxy, func(t *testing.T) {
			rd := redistest.Start(t)
			conf, addr, sluiceAddr := startProxied(t, proxy, func(c *Config) {
				c.Store, c.Policy = rd.URL(), ""
				c.PolicyData = []byte("schema:\n  ip:\n    children:\n      \"*\": {limits: [{algorithm: fixed_window, limit: 5, window: 1h}]}\n" +
					"  key:\n    children:\n      \"*\": {limits: [{algorithm: fixed_window, limit: 2, window: 1h}]}\n")
				c.ForwardAuth.Routes = []ForwardRoute{{Match: "/api/", Paths: [][]string{{"ip", "{client_ip}"}, {"key", "{header:X-Api-Key}"}}}}
			})
			var p *proxytest.Process
			if proxy == "nginx.conf" {
				p = proxytest.Nginx(t, conf, addr)
			} else {
				p = proxytest.Caddy(t, conf, addr)
			}
			c := clientFrom("127.0.0.9")
			get := func(key string) sent {
				return send(t, c, "GET", "http://"+p.Addr+"/api/orders", map[string]string{"X-Api-Key": key})
			}
			for i, want := range []int{200, 200, 429, 200, 200, 429} {
				key := "k1"
				if i >= 3 {
					key = "k2"
				}
				got := get(key)
				if got.status != want {
					t.Fatalf("request %d (key %s): %d, want %d\n%s", i+1, key, got.status, want, p.Output())
				}
				if want == 200 && (!strings.Contains(got.h.Get("RateLimit"), `"ip/*"`) || !strings.Contains(got.h.Get("RateLimit"), `"key/*"`)) {
					t.Errorf("request %d: RateLimit %q, want both policies named", i+1, got.h.Get("RateLimit"))
				}
			}
			// Four admitted; the two the keys denied spent nothing of the IP's 5.
			req, _ := http.NewRequest("POST", "http://"+sluiceAddr+"/v1/check", strings.NewReader(`{"path": ["ip", "127.0.0.9"], "cost": 0}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var d DecisionJSON
			json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if d.Remaining != 1 {
				t.Errorf("the IP's remaining, read back from Redis: %d, want 1 (5, less the 4 admitted)", d.Remaining)
			}
		})
	}
}

// TestProxiedKeyParts: the routes docs/proxies/README.md shows, keyed by a
// header, a query parameter and a cookie, one after another under
// missing: next, and the last under missing: deny (the default), behind the
// real nginx and Caddy of docs/proxies: the three carry one API key to one
// count, a request with none is refused 403 and never reaches the
// upstream, and a key sent twice is a 400.
func TestProxiedKeyParts(t *testing.T) {
	var routes Config
	if err := LoadConfigFile(docBlock(t, "../docs/proxies/README.md", "proxies: key parts"), &routes); err != nil {
		t.Fatal(err)
	}
	for _, proxy := range []string{"nginx.conf", "Caddyfile"} {
		t.Run(proxy, func(t *testing.T) {
			conf, addr, _ := startProxied(t, proxy, func(c *Config) {
				c.Policy = ""
				c.PolicyData = []byte("schema:\n  key:\n    children:\n      \"*\": {limits: [{algorithm: fixed_window, limit: 3, window: 24h}]}\n" +
					"  client:\n    children:\n      \"*\": {limits: [{algorithm: fixed_window, limit: 100, window: 24h}]}\n")
				c.ForwardAuth.Routes = routes.ForwardAuth.Routes
			})
			var p *proxytest.Process
			if proxy == "nginx.conf" {
				p = proxytest.Nginx(t, conf, addr)
			} else {
				p = proxytest.Caddy(t, conf, addr)
			}
			c := clientFrom("127.0.0.12")
			base := "http://" + p.Addr
			for i, tc := range []struct {
				uri  string
				h    map[string]string
				want int
			}{
				{"/api/orders", map[string]string{"X-Api-Key": "k1"}, 200},
				{"/api/orders?api_key=k1", nil, 200},
				{"/api/orders", map[string]string{"Cookie": "theme=dark; api_key=k1"}, 200},
				{"/api/orders?api_key=k1", nil, 429}, // k1's 4th, whichever way it came
				{"/api/orders", map[string]string{"Cookie": "api_key=k1"}, 429},
				{"/api/orders?api_key=k2", nil, 200},
				{"/api/orders", nil, 403},                                         // no key: missing: deny
				{"/api/orders?api_key=", map[string]string{"Cookie": "a=b"}, 403}, // empty keys are none
				{"/api/orders?api_key=k2&api_key=k3", nil, 400},
				{"/page", nil, 200},
			} {
				got := send(t, c, "GET", base+tc.uri, tc.h)
				if got.status != tc.want || (got.body == "upstream") != (tc.want == 200) {
					t.Fatalf("request %d, %s %v: %d %q, want %d\n%s", i+1, tc.uri, tc.h, got.status, got.body, tc.want, p.Output())
				}
			}
		})
	}
}

// docBlock writes the YAML block of the page whose first line is "# "+name
// to a file of the test's, and returns its path.
func docBlock(t *testing.T, page, name string) string {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```yaml\n# " + regexp.QuoteMeta(name) + "\n(.*?)```").FindSubmatch(text)
	if m == nil {
		t.Fatalf("%s has no block %q", page, name)
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, m[0][len("```yaml\n"):len(m[0])-3], 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRecipeBehindNginx: docs/recipes.md's route with three paths (per IP,
// per key, a month's quota) and its limits.yaml, as they are but for the
// addresses and store, behind the real nginx of docs/proxies on Redis: the
// key's 60 a minute are admitted, the 61st denied, and the denied one
// spends nothing of the IP's budget or the quota.
func TestRecipeBehindNginx(t *testing.T) {
	page, err := os.ReadFile("../docs/recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(name string) []byte {
		m := regexp.MustCompile("(?s)```yaml\n# recipes: " + regexp.QuoteMeta(name) + "\n(.*?)```").FindSubmatch(page)
		if m == nil {
			t.Fatalf("docs/recipes.md has no %s block", name)
		}
		return m[1]
	}
	sluiceYAML := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(sluiceYAML, block("sluice.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	var recipe Config
	if err := LoadConfigFile(sluiceYAML, &recipe); err != nil {
		t.Fatal(err)
	}
	rd := redistest.Start(t)
	conf, addr, sluiceAddr := startProxied(t, "nginx.conf", func(c *Config) {
		c.ForwardAuth = recipe.ForwardAuth
		c.Store, c.Policy, c.PolicyData = rd.URL(), "", block("limits.yaml")
	})
	p := proxytest.Nginx(t, conf, addr)
	if got := send(t, clientFrom("127.0.1.99"), "GET", "http://"+p.Addr+"/api/orders", nil); got.status != 403 || got.body == "upstream" {
		t.Errorf("a request without X-Api-Key: %d %q, want 403 (missing: deny)", got.status, got.body)
	}
	if got := send(t, clientFrom("127.0.1.99"), "GET", "http://"+p.Addr+"/about", nil); got.status != 200 {
		t.Errorf("a request to /about: %d, want 200 (unmatched: allow)", got.status)
	}
	left := func(path string) int64 {
		t.Helper()
		resp, err := http.Post("http://"+sluiceAddr+"/v1/check", "application/json", strings.NewReader(`{"path": `+path+`, "cost": 0}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var d DecisionJSON
		json.NewDecoder(resp.Body).Decode(&d)
		return d.Remaining
	}
	for round := 0; ; round++ {
		ip, key := fmt.Sprintf("127.0.1.%d", round+1), fmt.Sprintf("k%d", round)
		start := time.Now()
		c := clientFrom(ip)
		denied := 0
		for i := range 61 {
			got := send(t, c, "GET", "http://"+p.Addr+"/api/orders", map[string]string{"X-Api-Key": key})
			if want := map[bool]int{true: 429, false: 200}[i == 60]; got.status != want {
				if start.Truncate(time.Minute) != time.Now().Truncate(time.Minute) {
					break // the key's minute rolled over: again, afresh
				}
				t.Fatalf("request %d: %d, want %d\n%s", i+1, got.status, want, p.Output())
			}
			if got.status == 429 {
				denied++
			}
		}
		if start.Truncate(time.Minute) != time.Now().Truncate(time.Minute) || denied != 1 {
			continue
		}
		if ipLeft, quotaLeft := left(`["ip", "`+ip+`"]`), left(`["quota", "`+key+`"]`); ipLeft != 940 || quotaLeft != 99940 {
			t.Fatalf("after 60 admitted and 1 denied: the IP has %d left (want 940), the quota %d (want 99940)", ipLeft, quotaLeft)
		}
		return
	}
}

// TestLoginRecipeBehindNginx: docs/recipes.md's login recipe, its
// sluice.yaml and limits.yaml as they are but for the addresses and the
// store, behind the real nginx of docs/proxies on Redis: 5 tries per
// username and address, the 6th a 429 that starts the username's block,
// and the third username blocked from one address blocks the address for
// an hour, every username with it; another address is not blocked. A 15
// minute window that ends during a round starts it again, afresh.
func TestLoginRecipeBehindNginx(t *testing.T) {
	var recipe Config
	if err := LoadConfigFile(docBlock(t, "../docs/recipes.md", "recipes: login sluice.yaml"), &recipe); err != nil {
		t.Fatal(err)
	}
	limits, err := os.ReadFile(docBlock(t, "../docs/recipes.md", "recipes: login limits.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rd := redistest.Start(t)
	conf, addr, _ := startProxied(t, "nginx.conf", func(c *Config) {
		c.ForwardAuth = recipe.ForwardAuth
		c.Store, c.Policy, c.PolicyData = rd.URL(), "", limits
	})
	p := proxytest.Nginx(t, conf, addr)
	login := func(c *http.Client, user string) sent {
		t.Helper()
		uri := "http://" + p.Addr + "/login"
		if user != "" {
			uri += "?user=" + user
		}
		return send(t, c, "POST", uri, nil)
	}
	if got := login(clientFrom("127.0.3.250"), ""); got.status != 403 || got.body == "upstream" {
		t.Errorf("a login without ?user=: %d %q, want 403", got.status, got.body)
	}
	if got := send(t, clientFrom("127.0.3.250"), "GET", "http://"+p.Addr+"/about", nil); got.status != 200 {
		t.Errorf("GET /about: %d, want 200 (unmatched: allow)", got.status)
	}
	for round := 0; ; round++ {
		start := time.Now()
		c := clientFrom(fmt.Sprintf("127.0.3.%d", round+1))
		fresh := func() bool { return start.Truncate(15*time.Minute) == time.Now().Truncate(15*time.Minute) }
		ok := true
		for u, user := range []string{"alice", "bob", "carol"} {
			for i := range 7 {
				got := login(c, user)
				want, retry := 200, 0
				switch {
				case i == 5 && u == 2: // the third username blocked: the address too
					want, retry = 429, 3500
				case i >= 5:
					want, retry = 429, 850 // the username's block
				}
				if i == 6 && u == 2 {
					want, retry = 429, 3500
				}
				ra, _ := strconv.Atoi(got.h.Get("Retry-After"))
				if got.status != want || (got.body == "upstream") != (want == 200) || retry > 0 && (ra < retry || ra > 3600) {
					if !fresh() {
						ok = false
						break
					}
					t.Fatalf("round %d: %s's try %d: %d, Retry-After %q, want %d (Retry-After %d to 3600)\n%s", round, user, i+1, got.status, got.h.Get("Retry-After"), want, retry, p.Output())
				}
			}
			if !ok {
				break
			}
		}
		if !ok || !fresh() {
			continue // a 15-minute window ended meanwhile: again, afresh
		}
		// The address is blocked for every username, a fresh one too.
		if got := login(c, "dave"); got.status != 429 || !between(got.h.Get("Retry-After"), 3500, 3600) {
			t.Errorf("a fresh username from the blocked address: %d, Retry-After %q, want 429 for about an hour", got.status, got.h.Get("Retry-After"))
		}
		// Another address, the same usernames: not blocked.
		if got := login(clientFrom("127.0.3.200"), "alice"); got.status != 200 {
			t.Errorf("alice from another address: %d, want 200", got.status)
		}
		return
	}
}

// between reports whether the decimal v is from lo to hi.
func between(v string, lo, hi int) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= lo && n <= hi
}
