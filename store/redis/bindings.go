package redis

import (
	"embed"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/algo"
)

//go:embed scripts/*.lua
var scripts embed.FS

// binding is what the store knows of one kind of limit: the script file
// that holds its functions, how to pass a plan to it and how to read its
// reply. Each kind's binding lives in a file named after it; bindings
// holds them all, one per algo.Kind.
type binding struct {
	// file is the kind's script in scripts/, and letter the name of its
	// functions (<letter>_check ...) and of the kind in decide.lua's ARGV.
	// Kinds may share a file (GCRA and TokenBucket share tat.lua).
	file   string
	letter string
	// lazy kinds define <letter>_kind(), which builds their functions on
	// first use; the others define <letter>_check, <letter>_commit and
	// <letter>_undo.
	lazy bool
	// args appends the level's own arguments for a decision of cost.
	args func(args []string, p *algo.Plan, cost int64) []string
	// extras is how many values the script reports for the limit beyond
	// ok and value.
	extras func(p *algo.Plan) int64
	// result derives the level's Result from the script's check value and
	// extra values. A level that was ok but not committed (another level
	// denied) reports what a peek would: its state without this cost.
	result func(p *algo.Plan, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result
}

// bindings holds every kind's binding; TestEveryKindBound checks that none
// is missing.
var bindings = [algo.NumKinds]*binding{
	algo.KindGCRA:          &gcraBinding,
	algo.KindTokenBucket:   &tokenBucketBinding,
	algo.KindFixedWindow:   &fixedWindowBinding,
	algo.KindGate:          &gateBinding,
	algo.KindSlidingLog:    &slidingLogBinding,
	algo.KindWindowCounter: &windowCounterBinding,
	algo.KindConcurrency:   &concurrencyBinding,
}

// bind makes a binding's functions from functions of the concrete limit
// type L of the plans it is given.
func bind[L algo.Limit](b binding, args func([]string, L, int64) []string, extras func(L) int64,
	result func(L, int64, int64, bool, int64, []int64, bool) algo.Result) binding {
	b.args = func(a []string, p *algo.Plan, cost int64) []string { return args(a, limitOf[L](p), cost) }
	b.extras = func(*algo.Plan) int64 { return 0 }
	if extras != nil {
		b.extras = func(p *algo.Plan) int64 { return extras(limitOf[L](p)) }
	}
	b.result = func(p *algo.Plan, now, cost int64, ok bool, val int64, extra []int64, committed bool) algo.Result {
		return result(limitOf[L](p), now, cost, ok, val, extra, committed)
	}
	return b
}

// limitOf returns the limit a plan was compiled from, without its block
// (algo.Blocking) or debt (algo.Debt): the driver keeps those, the kind's
// binding decides.
func limitOf[L algo.Limit](p *algo.Plan) L {
	switch l := p.Limit().(type) {
	case algo.Blocking:
		return l.Limit.(L)
	case algo.Debt:
		return l.Limit.(L)
	default:
		return l.(L)
	}
}

// A driver is decide.lua or refund.lua, with the scripts composed for each
// set of kinds, built on first use.
type driver struct {
	file    string
	tables  []string // the per-kind dispatch tables it reads: "check", "commit", "undo"
	scripts [1 << algo.NumKinds]atomic.Pointer[rueidis.Lua]
}

// The drivers: a decision, several callers' decisions coalesced in one call, a refund.
var (
	decideDriver   = &driver{file: "decide.lua", tables: []string{"check", "commit"}}
	coalesceDriver = &driver{file: "coalesce.lua", tables: []string{"check", "commit"}}
	refundDriver   = &driver{file: "refund.lua", tables: []string{"undo"}}
)

// kindSet is a set of kinds, bit k for algo.Kind k.
type kindSet uint32

// script returns the driver's script for a set of kinds.
func (d *driver) script(set kindSet) *rueidis.Lua {
	if l := d.scripts[set].Load(); l != nil {
		return l
	}
	l := rueidis.NewLuaScript(d.compose(set))
	d.scripts[set].CompareAndSwap(nil, l)
	return d.scripts[set].Load()
}

// compose builds the script text: expire.lua, the files of the kinds in
// set (each file once), the dispatch tables, then the driver.
func (d *driver) compose(set kindSet) string {
	var b strings.Builder
	read := func(name string) {
		src, err := scripts.ReadFile("scripts/" + name)
		if err != nil {
			panic(err) // embedded at build time
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	var used []*binding // one per letter
	for k, bd := range bindings {
		if set&(1<<k) != 0 && !slices.ContainsFunc(used, func(u *binding) bool { return u.letter == bd.letter }) {
			used = append(used, bd)
		}
	}
	read("expire.lua")
	read("block.lua")
	for _, bd := range used {
		read(bd.file)
	}
	for _, table := range append(d.tables, "build") {
		b.WriteString("local " + table + " = {")
		for _, bd := range used {
			if bd.lazy == (table == "build") {
				fn := bd.letter + "_" + table
				if table == "build" {
					fn = bd.letter + "_kind"
				}
				b.WriteString(bd.letter + " = " + fn + ", ")
			}
		}
		b.WriteString("}\n")
	}
	read(d.file)
	return b.String()
}

// embeddedScript is a script made of embedded files, in order.
func embeddedScript(names ...string) *rueidis.Lua {
	var b strings.Builder
	for _, name := range names {
		src, err := scripts.ReadFile("scripts/" + name)
		if err != nil {
			panic(err) // embedded at build time
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return rueidis.NewLuaScript(b.String())
}
