package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/answer"
	"github.com/sluicehq/sluice/httplimit"
)

// The forward-auth endpoint answers a reverse proxy that asks, before it
// proxies a request, whether the request may go on: nginx (auth_request)
// at /v1/forward-auth/nginx, Traefik (ForwardAuth) and Caddy
// (forward_auth) at /v1/forward-auth. The proxied request is read from
// the proxy's headers, turned into a policy path by the first route of
// forward_auth.routes that matches it, and decided as a check of that
// path with cost 1: one proxied request is one decision.
//
// An allowed request gets 200 with the RateLimit fields. A denied one gets
// 429 with the fields and Retry-After, which Traefik and Caddy pass to the
// client as they are. nginx turns any status but 2xx, 401 and 403 into a
// 500, so at /v1/forward-auth/nginx every refusal is nginx_deny_status
// (403 unless set to 401) and the header Sluice-Status carries the status
// the client should see (429, 400, 414, 431 or 503), which the README's
// nginx snippet restores.

// Bounds of what the forward-auth endpoint reads of a proxied request.
const (
	// maxForwardURI bounds the proxied request's URI, in bytes: a longer
	// one is answered 414 (nginx's own buffers refuse one over 8 KiB).
	maxForwardURI = 8 << 10
	// maxForwardMethod bounds the proxied request's method: a longer one
	// is answered 400.
	maxForwardMethod = 32
	// maxRoutes bounds forward_auth.routes, and maxRouteSegments a route's
	// match and path.
	maxRoutes        = 1000
	maxRouteSegments = 32
)

// ForwardAuthConfig maps a proxied request to a policy path for the
// forward-auth endpoint. With no routes the endpoint answers 404.
type ForwardAuthConfig struct {
	// TrustedProxies are the networks whose forwarding header is believed
	// for {client_ip}: the proxies in front of Sluice (the one asking, and
	// any before it). With none, the client is the address the request
	// came from.
	TrustedProxies []netip.Prefix `yaml:"trusted_proxies"`
	// ClientIPHeader is the forwarding header those proxies maintain:
	// X-Forwarded-For (the default) or Forwarded.
	ClientIPHeader string `yaml:"client_ip_header"`
	// NginxDenyStatus is the status of every refusal at
	// /v1/forward-auth/nginx: 403 (the default) or 401.
	NginxDenyStatus int `yaml:"nginx_deny_status"`
	// Routes are tried in order; the first that matches the proxied
	// request names its path.
	Routes []ForwardRoute `yaml:"routes"`
	// Unmatched is what a request no route decides gets: allow (the
	// default: it goes on, counted nowhere) or deny (refused 403).
	// sluice validate --config refuses a config that lets a request
	// through so without saying unmatched: allow (Uncaught).
	Unmatched string `yaml:"unmatched"`
}

// Uncaught describes the requests that no route decides, which
// unmatched: allow lets through counted nowhere: "" when a route catches
// every request (match: /, every method, and no key it may lack under
// missing: next) or unmatched: deny refuses the rest, or when there are no
// routes (the endpoint answers 404). It assumes a config that loaded.
func (c ForwardAuthConfig) Uncaught() string {
	fa, err := newForwardAuth(c)
	if err != nil || len(fa.routes) == 0 || fa.denyUnmatched {
		return ""
	}
	why := "a request to a path no route matches (no route has match: /)"
	for i := range fa.routes {
		rt := &fa.routes[i]
		if !rt.prefix || len(rt.pattern) > 0 {
			continue
		}
		switch {
		case len(rt.methods) > 0:
			why = fmt.Sprintf("a request of another method than %s to a path no route before routes[%d] (match: /) matches", strings.Join(rt.methods, ", "), i)
		case rt.next && rt.keyed():
			why = fmt.Sprintf("a request that lacks a key of routes[%d] (match: /, missing: next) and that no route after it catches", i)
		default:
			return ""
		}
	}
	return why
}

// A ForwardRoute turns the proxied requests it matches into a policy path.
type ForwardRoute struct {
	// Match is a pattern of the request's URI path, as net/http's
	// ServeMux writes them without method or host: "/login" matches that
	// path only, "/api/" that path and every path below it, "/" every
	// path, and a segment "{name}" any one segment, which the route's
	// path can use. The path is percent-decoded and cleaned (dot segments
	// resolved, repeated slashes merged, each segment's ";params"
	// dropped) before it is matched, and a literal segment matches in any
	// case (/LOGIN is /login): a route limits every spelling an app may
	// route to it. A wildcard takes the segment as sent.
	Match string `yaml:"match"`
	// Methods, when set, limits the route to these request methods.
	Methods []string `yaml:"methods"`
	// Path is the policy path, a segment per entry: a literal, or one of
	// "{client_ip}", "{method}", "{host}", "{header:Name}" (the request's
	// header Name), "{query:name}" (its URI's query parameter name),
	// "{cookie:name}" (its cookie name) and "{name}" (a wildcard of
	// Match). A header, query parameter or cookie may be missing: see
	// Missing.
	Path []string `yaml:"path"`
	// Paths, instead of Path, are several policy paths, each written as
	// Path is, decided together, all or nothing: per client IP, per API
	// key and a quota in one decision, so that a request one of them
	// denies spends nothing of the others. At most maxPaths.
	Paths [][]string `yaml:"paths"`
	// Cost is how much one request costs (default 1).
	Cost int64 `yaml:"cost"`
	// Missing is what a request that matches the route but lacks a header,
	// query parameter or cookie its paths key by (absent or empty) gets:
	// deny (the default: refused 403, counted nowhere) or next (the
	// routes after this one are tried, as if it had not matched). A
	// missing key never means unlimited unless a config says so.
	Missing string `yaml:"missing"`
}

// UnmarshalYAML checks the section as it loads, so that an error names its
// file and line.
func (c *ForwardAuthConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type plain ForwardAuthConfig
	if err := unmarshal((*plain)(c)); err != nil {
		return err
	}
	_, err := newForwardAuth(*c)
	return err
}

// UnmarshalYAML checks the route as it loads.
func (r *ForwardRoute) UnmarshalYAML(unmarshal func(any) error) error {
	type plain ForwardRoute
	if err := unmarshal((*plain)(r)); err != nil {
		return err
	}
	_, err := compileRoute(*r)
	return err
}

// forwardAuth is a compiled ForwardAuthConfig.
type forwardAuth struct {
	ip            httplimit.IPKey
	nginxDeny     int
	routes        []route
	denyUnmatched bool
}

// A route is a compiled ForwardRoute.
type route struct {
	pattern []patSeg
	prefix  bool // the pattern ends in "/": paths below it match too
	methods []string
	paths   [][]tmplSeg // one or more policy paths, decided together
	cost    int64
	next    bool   // missing: next
	match   string // the route's match, for a refusal's message
}

// A patSeg is a segment of a route's pattern: a literal, or a wildcard.
type patSeg struct {
	lit  string
	name string // the wildcard's name; "" for a literal
}

// Kinds of a path template's segment.
const (
	segLiteral = iota
	segClientIP
	segMethod
	segHost
	segHeader   // text is the header's canonical name
	segQuery    // text is the query parameter's name
	segCookie   // text is the cookie's name
	segWildcard // at is the pattern segment it takes
)

// missable reports whether a template segment of kind k may be missing
// from a request (see ForwardRoute.Missing).
func missable(k int) bool { return k == segHeader || k == segQuery || k == segCookie }

type tmplSeg struct {
	kind int
	text string
	at   int
}

func newForwardAuth(c ForwardAuthConfig) (*forwardAuth, error) {
	fa := &forwardAuth{ip: httplimit.IPKey{TrustedProxies: c.TrustedProxies, Header: c.ClientIPHeader}, nginxDeny: c.NginxDenyStatus}
	switch textproto.CanonicalMIMEHeaderKey(c.ClientIPHeader) {
	case "", "X-Forwarded-For", "Forwarded":
	default:
		return nil, fmt.Errorf("client_ip_header must be X-Forwarded-For or Forwarded, got %q", c.ClientIPHeader)
	}
	switch c.NginxDenyStatus {
	case 0:
		fa.nginxDeny = http.StatusForbidden
	case http.StatusUnauthorized, http.StatusForbidden:
	default:
		return nil, fmt.Errorf("nginx_deny_status must be 401 or 403 (nginx answers 500 for any other), got %d", c.NginxDenyStatus)
	}
	switch c.Unmatched {
	case "", "allow":
	case "deny":
		fa.denyUnmatched = true
	default:
		return nil, fmt.Errorf("unmatched must be allow or deny, got %q", c.Unmatched)
	}
	if len(c.Routes) > maxRoutes {
		return nil, fmt.Errorf("routes: at most %d, got %d", maxRoutes, len(c.Routes))
	}
	for i, r := range c.Routes {
		cr, err := compileRoute(r)
		if err != nil {
			return nil, fmt.Errorf("routes[%d]: %w", i, err)
		}
		fa.routes = append(fa.routes, cr)
	}
	return fa, nil
}

func compileRoute(r ForwardRoute) (route, error) {
	var cr route
	if !strings.HasPrefix(r.Match, "/") {
		return cr, fmt.Errorf("match must be a path that starts with /, got %q", r.Match)
	}
	text := r.Match[1:]
	cr.prefix = text == "" || strings.HasSuffix(text, "/")
	text = strings.TrimSuffix(text, "/")
	if text != "" {
		for _, s := range strings.Split(text, "/") {
			switch {
			case s == "" || s == "." || s == "..":
				return cr, fmt.Errorf("match %q: empty, . and .. segments never match a cleaned path", r.Match)
			case s[0] == '{':
				name, ok := strings.CutSuffix(s[1:], "}")
				if !ok || !validName(name) {
					return cr, fmt.Errorf("match %q: a wildcard is {name} with a name of letters, digits and _, got %q", r.Match, s)
				}
				for _, p := range cr.pattern {
					if p.name == name {
						return cr, fmt.Errorf("match %q: wildcard {%s} appears twice", r.Match, name)
					}
				}
				cr.pattern = append(cr.pattern, patSeg{name: name})
			case strings.ContainsAny(s, "{}"):
				return cr, fmt.Errorf("match %q: a wildcard fills a whole segment, got %q", r.Match, s)
			default:
				cr.pattern = append(cr.pattern, patSeg{lit: s})
			}
		}
	}
	if len(cr.pattern) > maxRouteSegments {
		return cr, fmt.Errorf("match %q: at most %d segments", r.Match, maxRouteSegments)
	}
	for _, m := range r.Methods {
		if m == "" || len(m) > maxForwardMethod || strings.ContainsAny(m, " \t/{}") {
			return cr, fmt.Errorf("methods: %q is not a method", m)
		}
		cr.methods = append(cr.methods, strings.ToUpper(m))
	}
	templates, field := r.Paths, "paths"
	switch {
	case len(r.Path) > 0 && len(r.Paths) > 0:
		return cr, errors.New("path and paths: give one policy path, or several in paths, not both")
	case len(r.Path) > 0 || len(r.Paths) == 0:
		templates, field = [][]string{r.Path}, "path"
	case len(r.Paths) > maxPaths:
		return cr, fmt.Errorf("paths: at most %d, got %d", maxPaths, len(r.Paths))
	}
	for i, tmpl := range templates {
		at := field
		if field == "paths" {
			at = fmt.Sprintf("paths[%d]", i)
		}
		if len(tmpl) == 0 {
			return cr, fmt.Errorf("%s: a route needs a policy path of at least one segment", at)
		}
		if len(tmpl) > maxRouteSegments {
			return cr, fmt.Errorf("%s: at most %d segments, got %d", at, maxRouteSegments, len(tmpl))
		}
		var path []tmplSeg
		for j, s := range tmpl {
			t, err := compileSeg(s, cr.pattern)
			if err != nil {
				return cr, fmt.Errorf("%s[%d]: %w", at, j, err)
			}
			path = append(path, t)
		}
		cr.paths = append(cr.paths, path)
	}
	cr.match = r.Match
	switch r.Missing {
	case "", "deny":
	case "next":
		cr.next = true
	default:
		return cr, fmt.Errorf("missing must be deny or next, got %q", r.Missing)
	}
	if r.Missing != "" && !cr.keyed() {
		return cr, fmt.Errorf("missing: %s: the route keys by no header, query parameter or cookie, which alone may be missing", r.Missing)
	}
	switch {
	case r.Cost < 0:
		return cr, fmt.Errorf("cost must not be negative, got %d", r.Cost)
	case r.Cost == 0:
		cr.cost = 1
	default:
		cr.cost = r.Cost
	}
	return cr, nil
}

// keyed reports whether the route keys by a part a request may lack.
func (rt *route) keyed() bool {
	for _, path := range rt.paths {
		for _, t := range path {
			if missable(t.kind) {
				return true
			}
		}
	}
	return false
}

func compileSeg(s string, pattern []patSeg) (tmplSeg, error) {
	if s == "" {
		return tmplSeg{}, errors.New("a segment is never empty")
	}
	inner, ok := strings.CutPrefix(s, "{")
	if !ok {
		if strings.ContainsAny(s, "{}") {
			return tmplSeg{}, fmt.Errorf("a placeholder fills a whole segment, got %q", s)
		}
		return tmplSeg{kind: segLiteral, text: s}, nil
	}
	inner, ok = strings.CutSuffix(inner, "}")
	if !ok {
		return tmplSeg{}, fmt.Errorf("%q does not end in }", s)
	}
	switch {
	case inner == "client_ip":
		return tmplSeg{kind: segClientIP}, nil
	case inner == "method":
		return tmplSeg{kind: segMethod}, nil
	case inner == "host":
		return tmplSeg{kind: segHost}, nil
	case strings.HasPrefix(inner, "header:"):
		name := inner[len("header:"):]
		if name == "" || strings.ContainsAny(name, " \t:{}") {
			return tmplSeg{}, fmt.Errorf("%q: want {header:Name}", s)
		}
		return tmplSeg{kind: segHeader, text: textproto.CanonicalMIMEHeaderKey(name)}, nil
	case strings.HasPrefix(inner, "query:"):
		name := inner[len("query:"):]
		if name == "" || len(name) > maxPartName || strings.ContainsAny(name, "&=#{} \t") {
			return tmplSeg{}, fmt.Errorf("%q: want {query:name}, a name of 1 to %d bytes without &, =, #, braces or blanks (as it is sent, percent-decoded)", s, maxPartName)
		}
		return tmplSeg{kind: segQuery, text: name}, nil
	case strings.HasPrefix(inner, "cookie:"):
		name := inner[len("cookie:"):]
		if name == "" || len(name) > maxPartName || !validCookieName(name) {
			return tmplSeg{}, fmt.Errorf("%q: want {cookie:name}, a cookie name of 1 to %d bytes (an RFC 6265 token)", s, maxPartName)
		}
		return tmplSeg{kind: segCookie, text: name}, nil
	}
	for i, p := range pattern {
		if p.name != "" && p.name == inner {
			return tmplSeg{kind: segWildcard, at: i}, nil
		}
	}
	return tmplSeg{}, fmt.Errorf("%q is none of {client_ip}, {method}, {host}, {header:Name}, {query:name}, {cookie:name} and the match's wildcards", s)
}

// maxPartName bounds the name of a query parameter or cookie a route keys
// by.
const maxPartName = 256

// validCookieName reports whether name is an RFC 6265 cookie name (a
// token): what net/http reads a Cookie header's names as.
func validCookieName(name string) bool {
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// A forwardError is a proxied request the endpoint cannot decide: the
// status and message it is refused with. It is not an error value: the
// functions that read the request return it typed, so that nil is nil.
type forwardError struct {
	status int
	msg    string
	// refused: the config refuses the request (missing: deny,
	// unmatched: deny), which is no bad request.
	refused bool
}

// original returns the proxied request's method, URI and host from the
// headers its proxy sets, and only from those: at the nginx endpoint
// X-Original-Method and X-Original-URI (the auth_request location sets
// them), at the other X-Forwarded-Method and X-Forwarded-Uri (Traefik and
// Caddy set them, overwriting a client's copy). A client's copy of the
// other endpoint's headers is never read. The host is X-Forwarded-Host,
// else the request's Host. docs/proxies/README.md tables who sets what.
func original(r *http.Request, nginx bool) (method, uri, host string, fe *forwardError) {
	h := r.Header
	mName, uName := "X-Forwarded-Method", "X-Forwarded-Uri"
	if nginx {
		mName, uName = "X-Original-Method", "X-Original-Uri"
	}
	method, uri = h.Get(mName), h.Get(uName)
	if method == "" || uri == "" || len(h[mName]) > 1 || len(h[uName]) > 1 {
		return "", "", "", &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the proxy must set %s and %s once each (see docs/proxies)", mName, uName)}
	}
	host = r.Host
	if v := h["X-Forwarded-Host"]; len(v) > 0 && v[0] != "" {
		host = v[0]
	}
	return method, uri, host, nil
}

// cleanPath appends to segs the segments of uri's path, percent-decoded,
// with dot segments resolved and empty ones dropped.
func cleanPath(uri string, segs []string) ([]string, *forwardError) {
	if len(uri) > maxForwardURI {
		return segs, &forwardError{status: http.StatusRequestURITooLong, msg: fmt.Sprintf("the proxied URI has %d bytes, more than %d", len(uri), maxForwardURI)}
	}
	p := uri
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if strings.Contains(p, "://") { // an absolute URI: its path
		if u, err := url.Parse(p); err == nil {
			p = u.EscapedPath()
		}
	}
	if !strings.HasPrefix(p, "/") {
		return segs, &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the proxied URI %.64q is not a path", uri)}
	}
	if strings.IndexByte(p, ';') >= 0 {
		p = dropParams(p)
	}
	if strings.IndexByte(p, '%') >= 0 {
		d, err := url.PathUnescape(p)
		if err != nil {
			return segs, &forwardError{status: http.StatusBadRequest, msg: "the proxied URI's path: " + err.Error()}
		}
		p = d
	}
	for rest := p; rest != ""; {
		var s string
		s, rest, _ = strings.Cut(rest, "/")
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return segs, nil
}

// dropParams removes each segment's parameters (";jsessionid=x"), which
// servers such as Tomcat strip before they route: /login;x is /login.
func dropParams(p string) string {
	var b strings.Builder
	for rest := p; ; {
		seg, tail, more := strings.Cut(rest, "/")
		seg, _, _ = strings.Cut(seg, ";")
		b.WriteString(seg)
		if !more {
			return b.String()
		}
		b.WriteByte('/')
		rest = tail
	}
}

// matches reports whether the route's pattern and methods match a
// request of method whose cleaned path has the segments segs.
func (rt *route) matches(method string, segs []string) bool {
	if len(segs) < len(rt.pattern) || !rt.prefix && len(segs) != len(rt.pattern) {
		return false
	}
	if len(rt.methods) > 0 && !slices.Contains(rt.methods, method) {
		return false
	}
	for j, p := range rt.pattern {
		if p.name == "" && !strings.EqualFold(p.lit, segs[j]) {
			return false
		}
	}
	return true
}

// policyPath appends to path a policy path of the route, tmpl, for the
// request. missing names the first part of it the request lacks (""
// for none), and the path is then unfinished.
func (fa *forwardAuth) policyPath(tmpl []tmplSeg, r *http.Request, method, uri, host string, segs, path []string) (_ []string, missing string, _ *forwardError) {
	for _, t := range tmpl {
		switch t.kind {
		case segLiteral:
			path = append(path, t.text)
		case segClientIP:
			ip, err := fa.ip.Key(r)
			if err != nil {
				return path, "", &forwardError{status: http.StatusBadRequest, msg: err.Error()}
			}
			path = append(path, ip)
		case segMethod:
			path = append(path, method)
		case segHost:
			path = append(path, host)
		case segHeader:
			v := r.Header[t.text]
			switch {
			case len(v) == 0 || v[0] == "":
				return path, "the header " + t.text, nil
			case len(v) > 1:
				return path, "", &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the header %s, a key, is sent %d times (the app may read another copy than Sluice)", t.text, len(v))}
			case len(v[0]) > httplimit.MaxHeaderKeyLen:
				return path, "", &forwardError{status: http.StatusRequestHeaderFieldsTooLarge, msg: fmt.Sprintf("header %s has %d bytes, more than the %d a key may have", t.text, len(v[0]), httplimit.MaxHeaderKeyLen)}
			}
			path = append(path, v[0])
		case segQuery:
			v, fe := queryParam(uri, t.text)
			switch {
			case fe != nil:
				return path, "", fe
			case v == "":
				return path, "the query parameter " + t.text, nil
			}
			path = append(path, v)
		case segCookie:
			cs := r.CookiesNamed(t.text)
			switch {
			case len(cs) == 0 || cs[0].Value == "":
				return path, "the cookie " + t.text, nil
			case len(cs) > 1:
				return path, "", &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the cookie %s, a key, is sent %d times (the app may read another copy than Sluice)", t.text, len(cs))}
			case len(cs[0].Value) > httplimit.MaxHeaderKeyLen:
				return path, "", &forwardError{status: http.StatusRequestHeaderFieldsTooLarge, msg: fmt.Sprintf("the cookie %s has %d bytes, more than the %d a key may have", t.text, len(cs[0].Value), httplimit.MaxHeaderKeyLen)}
			}
			path = append(path, cs[0].Value)
		case segWildcard:
			path = append(path, segs[t.at])
		}
	}
	return path, "", nil
}

// queryParam returns the value of the query parameter name in uri's
// query, percent-decoded ("+" is a space): "" when it is absent or
// empty. A parameter given twice, or a value with a bad escape or longer
// than a key may be, is refused.
func queryParam(uri, name string) (string, *forwardError) {
	_, q, ok := strings.Cut(uri, "?")
	if !ok {
		return "", nil
	}
	q, _, _ = strings.Cut(q, "#")
	var val string
	found := 0
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			if dk, err := url.QueryUnescape(k); err != nil || dk != name {
				continue
			}
		}
		if found++; found > 1 {
			return "", &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the query parameter %s, a key, is sent more than once (the app may read another copy than Sluice)", name)}
		}
		d, err := url.QueryUnescape(v)
		if err != nil {
			return "", &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the query parameter %s: %v", name, err)}
		}
		val = d
	}
	if len(val) > httplimit.MaxHeaderKeyLen {
		return "", &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the query parameter %s has %d bytes, more than the %d a key may have", name, len(val), httplimit.MaxHeaderKeyLen)}
	}
	return val, nil
}

// handleForwardAuth is the forward-auth endpoint; nginx is whether it
// answers nginx (every refusal nginxDeny, the real status in
// Sluice-Status).
func (s *Server) handleForwardAuth(nginx bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fa := s.forwardAuth
		if fa == nil {
			writeProblem(w, http.StatusNotFound, "forward_auth has no routes in this service's config")
			return
		}
		s.inflight.Add(1)
		defer s.inflight.Done()
		c := answer.Get("forward_auth")
		defer c.Put()

		refuse := func(status int, detail string) {
			if nginx && status != http.StatusOK {
				w.Header()["Sluice-Status"] = []string{strconv.Itoa(status)}
				status = fa.nginxDeny
			}
			writeProblem(w, status, detail)
		}
		method, uri, host, fe := original(r, nginx)
		var rt *route
		if fe == nil {
			rt, fe = fa.read(r, method, uri, host, c)
		}
		switch {
		case fe != nil && fe.refused:
			s.m.forwardRefused.Inc()
			refuse(fe.status, fe.msg)
		case fe != nil:
			s.m.badRequests.WithLabelValues("forward_auth").Inc()
			refuse(fe.status, fe.msg)
		case rt == nil:
			w.WriteHeader(http.StatusOK) // no route: not limited
		default:
			s.answerForward(w, r, c, refuse)
		}
	}
}

// read turns the proxied request into the route that decides it (nil
// for none) and c's query of that route's policy paths: the
// first route that matches it and finds each part it keys by, or lacks
// one and says missing: deny (a refusal); under unmatched: deny, a
// request no route decides is refused.
func (fa *forwardAuth) read(r *http.Request, method, uri, host string, c *answer.Call) (*route, *forwardError) {
	if len(method) > maxForwardMethod {
		return nil, &forwardError{status: http.StatusBadRequest, msg: fmt.Sprintf("the proxied method has %d bytes, more than %d", len(method), maxForwardMethod)}
	}
	segs, fe := cleanPath(uri, c.Segs[:0])
	c.Segs = segs[:0]
	if fe != nil {
		return nil, fe
	}
next:
	for i := range fa.routes {
		rt := &fa.routes[i]
		if !rt.matches(method, segs) {
			continue
		}
		c.Paths = c.Paths[:0]
		for i, tmpl := range rt.paths {
			var buf []string
			if i == 0 {
				buf = c.Path[:0]
			}
			path, missing, fe := fa.policyPath(tmpl, r, method, uri, host, segs, buf)
			if i == 0 {
				c.Path = path[:0]
			}
			if fe == nil && missing != "" {
				if rt.next {
					continue next
				}
				fe = &forwardError{status: http.StatusForbidden, refused: true, msg: fmt.Sprintf("the route %s keys by %s, which the request lacks (missing: deny)", rt.match, missing)}
			}
			if fe == nil {
				if err := validPath(path); err != nil {
					fe = &forwardError{status: http.StatusBadRequest, msg: "the route's policy path: " + err.Error()}
				}
			}
			if fe != nil {
				return rt, fe
			}
			c.Paths = append(c.Paths, path)
		}
		c.Query.Paths = slices.Grow(c.Query.Paths, len(c.Paths))[:len(c.Paths)]
		pqs := c.Query.Paths
		for i := range pqs {
			pqs[i].Path, pqs[i].Cost = c.Paths[i], rt.cost
		}
		return rt, nil
	}
	if fa.denyUnmatched {
		return nil, &forwardError{status: http.StatusForbidden, refused: true, msg: "no route decides the request (forward_auth.unmatched: deny)"}
	}
	return nil, nil
}

// answerForward answers a proxied request's paths, decided together:
// allowed, 200 with the RateLimit fields; else a refusal.
func (s *Server) answerForward(w http.ResponseWriter, r *http.Request, c *answer.Call, refuse func(int, string)) {
	c.Wait = true
	s.pipe.Answer(r.Context(), c)
	s.observe(c)
	switch {
	case c.Gone:
		return // the proxy has gone, and any units taken are back
	case c.Status == http.StatusBadRequest:
		refuse(c.Status, c.Err.Error())
		return
	}
	c.SetHeader(w.Header(), s.cfg.Headers != "legacy", s.cfg.Headers != "draft")
	switch {
	case c.Status == http.StatusOK:
		w.WriteHeader(c.Status)
	case c.Failed:
		refuse(c.Status, "store unavailable: "+c.Err.Error())
	default:
		refuse(c.Status, "rate limited")
	}
}
