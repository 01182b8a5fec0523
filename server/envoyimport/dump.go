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
func Dump(files []File) string {
	var b strings.Builder
	for _, f := range files {
		var r root
		if yamlfile.Decode(f.Name, f.Data, &r) == nil {
			dump(&b, string(r.Domain)+".", r.Descriptors)
		}
	}
	return b.String()
}

// DumpXDS is Dump for the RateLimitConfig resources of an xDS update.
func DumpXDS(configs []*rlsconfv3.RateLimitConfig) string {
	var b strings.Builder
	for _, rc := range configs {
		dump(&b, rc.GetDomain()+".", fromProto(rc.GetDescriptors(), 1))
	}
	return b.String()
}

// dump writes the lines of ds, whose keys begin with prefix: the domain
// and its ancestors' key or key_value, each followed by a dot.
func dump(b *strings.Builder, prefix string, ds []descriptor) {
	for _, d := range ds {
		key := prefix + string(d.Key)
		if d.Value != "" {
			key += "_" + string(d.Value)
		}
		if rl := d.RateLimit; rl != nil {
			unit, perUnit := "UNKNOWN", uint32(0) // unlimited: no unit
			if _, ok := Units[strings.ToLower(rl.Unit)]; ok && !rl.Unlimited {
				unit = strings.ToUpper(rl.Unit)
			}
			if rl.RequestsPerUnit != nil {
				perUnit = *rl.RequestsPerUnit
			}
			fmt.Fprintf(b, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n", key, unit, perUnit, d.ShadowMode, d.QuotaMode)
		}
		dump(b, key+".", d.Descriptors)
	}
}
