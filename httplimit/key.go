package httplimit

import (
	"errors"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
)

// ErrNoKey is wrapped by the errors of KeyFuncs that cannot key a request.
var ErrNoKey = errors.New("httplimit: no key for the request")

// MaxHeaderKeyLen bounds the key a Header KeyFunc takes from a request, in
// bytes; a longer value is ErrNoKey rather than a key that the store would
// refuse.
const MaxHeaderKeyLen = 256

// A KeyFunc names the caller a request is counted against, such as its
// client IP or its API key. The key is used as a path segment as it is:
// the policy's key layer escapes it. An error (wrapping ErrNoKey, by
// convention) makes the middleware answer with Options.OnBadRequest.
type KeyFunc func(r *http.Request) (string, error)

// IPKey keys requests by their client's IP address.
//
// The address is the peer's (Request.RemoteAddr) unless the peer is a
// trusted proxy: then the forwarding header is read from right to left,
// skipping addresses of trusted proxies, and the first address that is
// not one is the client. A header sent by a peer that is not trusted is
// ignored, so a client cannot choose its key by sending a made-up
// X-Forwarded-For; and only the entries appended by trusted proxies are
// believed, never what the client put to their left. If every entry is a
// trusted proxy, the leftmost is the client. An entry that is not an IP
// address stops the walk at the last address that was one.
//
// IPv4-mapped IPv6 addresses are keyed as IPv4. The key is the address in
// its canonical form (netip.Addr.String), without port or zone.
type IPKey struct {
	// TrustedProxies are the networks of the proxies whose forwarding
	// header is believed (e.g. netip.MustParsePrefix("10.0.0.0/8")). With
	// none, the header is never read.
	TrustedProxies []netip.Prefix
	// Header is the forwarding header the trusted proxies maintain:
	// "X-Forwarded-For" (when empty) or "Forwarded" (RFC 7239, whose for=
	// parameters are read). Name the one your proxies append to: a header
	// they pass through untouched is the client's to forge.
	Header string
}

// Key implements KeyFunc.
func (k IPKey) Key(r *http.Request) (string, error) {
	peerText := hostOf(r.RemoteAddr)
	peer, err := netip.ParseAddr(peerText)
	if err != nil {
		return "", &keyError{"RemoteAddr " + quote(r.RemoteAddr) + " is not an IP address"}
	}
	peer = peer.Unmap().WithZone("")
	if !k.trusted(peer) {
		return canonical(peerText, peer), nil
	}
	name := "X-Forwarded-For"
	forwarded := false
	if k.Header != "" {
		name = textproto.CanonicalMIMEHeaderKey(k.Header)
		forwarded = name == "Forwarded"
	}
	client, clientText := peer, peerText
	lines := r.Header[name]
	// Walk the hops right to left: the last line's last entry first.
	for li := len(lines) - 1; li >= 0; li-- {
		rest := lines[li]
		for rest != "" {
			var hop string
			if i := strings.LastIndexByte(rest, ','); i >= 0 {
				hop, rest = rest[i+1:], rest[:i]
			} else {
				hop, rest = rest, ""
			}
			if forwarded {
				hop = forwardedFor(hop)
			}
			hop = strings.TrimSpace(hop)
			if hop == "" && !forwarded {
				continue // "a, , b": an empty list element is no hop
			}
			text := hostOf(hop)
			a, err := netip.ParseAddr(text)
			if err != nil {
				return canonical(clientText, client), nil
			}
			a = a.Unmap().WithZone("")
			client, clientText = a, text
			if !k.trusted(a) {
				return canonical(text, a), nil
			}
		}
	}
	return canonical(clientText, client), nil
}

func (k IPKey) trusted(a netip.Addr) bool {
	for _, p := range k.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hostOf strips a port, and the brackets of an IPv6 literal, from an
// address: "1.2.3.4:80" and "[::1]:80" give "1.2.3.4" and "::1". It
// returns other text as it is.
func hostOf(s string) string {
	if strings.HasPrefix(s, "[") {
		if i := strings.IndexByte(s, ']'); i > 0 {
			return s[1:i]
		}
		return s
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 && strings.IndexByte(s, ':') == i {
		return s[:i] // one colon: IPv4 with a port; more: a bare IPv6 address
	}
	return s
}

// forwardedFor returns the for= value of one element of a Forwarded header
// (RFC 7239: "for=192.0.2.43;proto=https", "For=\"[2001:db8::1]:4711\""),
// unquoted, or "" when it has none.
func forwardedFor(elem string) string {
	for elem != "" {
		var pair string
		if i := strings.IndexByte(elem, ';'); i >= 0 {
			pair, elem = elem[:i], elem[i+1:]
		} else {
			pair, elem = elem, ""
		}
		pair = strings.TrimSpace(pair)
		if len(pair) > 4 && strings.EqualFold(pair[:4], "for=") {
			v := pair[4:]
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// canonical returns text when it already is a's canonical form, so that
// the common case allocates nothing, and a.String() otherwise.
func canonical(text string, a netip.Addr) string {
	var buf [64]byte
	if string(a.AppendTo(buf[:0])) == text {
		return text
	}
	return a.String()
}

// Header keys requests by the value of a request header, such as an API
// key in X-API-Key. A request without the header (or with an empty value,
// or one longer than MaxHeaderKeyLen) is keyed by fallback, or is an
// ErrNoKey error when fallback is nil.
func Header(name string, fallback KeyFunc) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header[name]; len(v) > 0 && v[0] != "" && len(v[0]) <= MaxHeaderKeyLen {
			return v[0], nil
		}
		if fallback != nil {
			return fallback(r)
		}
		if v := r.Header[name]; len(v) > 0 && len(v[0]) > MaxHeaderKeyLen {
			return "", &keyError{"header " + name + " is longer than " + strconv.Itoa(MaxHeaderKeyLen) + " bytes"}
		}
		return "", &keyError{"no header " + name}
	}
}

type keyError struct{ msg string }

func (e *keyError) Error() string { return ErrNoKey.Error() + ": " + e.msg }
func (e *keyError) Unwrap() error { return ErrNoKey }

func quote(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}
