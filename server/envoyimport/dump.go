package envoyimport

import (
	"fmt"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/yamlfile"
)

// Dump is the configuration of files as envoyproxy/ratelimit prints it at
// /rlconfig on its debug port: a line for each descriptor with a
// rate_limit, such as "mongo_cps.database_users: unit=SECOND
// requests_per_unit=500, shadow_mode: false, quota_mode: false", in the
// files' order (envoyproxy/ratelimit's is its maps', which varies). A
// file that does not parse is left out: Convert refuses it.
//
// unlimited holds the patterns of the policy nodes Convert makes of the
// descriptors with rate_limit {unlimited: true} (such as "domain/key/*"):
// envoyproxy/ratelimit answers those as unlimited, and not the other
// nodes that Convert makes unlimited (a descriptor with neither rate_limit
// nor nested descriptors, a domain without descriptors), nor an
// unlimited descriptor's descendants; an unlimited descriptor with nested
// descriptors is one, though Convert makes it a node without limits.
// quota holds the patterns of the descriptors whose own quota_mode is on
// (not shadow_mode), which envoyproxy/ratelimit's dynamic metadata names
// whatever QUOTA_MODE says.
func Dump(files []File) (text string, unlimited, quota map[string]bool) {
	var b strings.Builder
	unlimited, quota = map[string]bool{}, map[string]bool{}
	for _, f := range files {
		var r root
		if yamlfile.Decode(f.Name, f.Data, &r) == nil {
			dump(&b, unlimited, quota, string(r.Domain)+".", string(r.Domain)+"/", r.Descriptors)
		}
	}
	return b.String(), unlimited, quota
}

// DumpXDS is Dump for the RateLimitConfig resources of an xDS update
// (which carry no quota_mode).
func DumpXDS(configs []*rlsconfv3.RateLimitConfig) (text string, unlimited map[string]bool) {
	var b strings.Builder
	unlimited = map[string]bool{}
	for _, rc := range configs {
		dump(&b, unlimited, nil, rc.GetDomain()+".", rc.GetDomain()+"/", fromProto(rc.GetDescriptors(), 1))
	}
	return b.String(), unlimited
}

// dump writes the lines of ds, whose keys begin with prefix: the domain
// and its ancestors' key or key_value, each followed by a dot; and adds to
// unlimited the patterns of the unlimited ones, and to quota (if not nil)
// those in quota mode of their own, whose nodes' patterns begin with
// pattern (the same names, a key without a value "*", each
// followed by a slash).
func dump(b *strings.Builder, unlimited, quota map[string]bool, prefix, pattern string, ds []descriptor) {
	for _, d := range ds {
		key := prefix + string(d.Key)
		value := string(d.Value)
		if value != "" {
			key += "_" + value
		} else {
			value = "*"
		}
		var pat string // the node's pattern, made only when needed
		ownQuota := quota != nil && d.QuotaMode && !d.ShadowMode
		if d.RateLimit != nil && d.RateLimit.Unlimited || len(d.Descriptors) > 0 || ownQuota {
			pat = pattern + string(d.Key) + "/" + value
		}
		if rl := d.RateLimit; rl != nil {
			if rl.Unlimited {
				unlimited[pat] = true
			}
			if ownQuota {
				quota[pat] = true
			}
			unit, perUnit := "UNKNOWN", uint32(0) // unlimited: no unit
			if _, ok := units[strings.ToLower(rl.Unit)]; ok && !rl.Unlimited {
				unit = strings.ToUpper(rl.Unit)
			}
			if rl.RequestsPerUnit != nil {
				perUnit = *rl.RequestsPerUnit
			}
			fmt.Fprintf(b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n", key, unit, perUnit, d.ShadowMode, d.QuotaMode)
		}
		dump(b, unlimited, quota, key+".", pat+"/", d.Descriptors)
	}
}
