package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/store"
)

// A UserScript is a user-supplied Lua limiter (a store.Script), loaded
// into Redis at start-up by Store.LoadScript and run with EVALSHA for
// every request: the scripts Sluice's own algorithms run are in scripts/,
// embedded. KEYS[1] is the request's key and ARGV the script's arguments;
// the reply's contract is the httplimit script limiter's
// (httplimit.NewScript). examples/window_from_first.lua and
// examples/token_bucket.lua in this package's directory are examples.
type UserScript struct {
	file string
	name string
	lua  *rueidis.Lua
	s    *Store
}

var _ store.Script = (*UserScript)(nil)

// LoadScript reads a Lua script file and loads it (SCRIPT LOAD) into every
// node of the store's Redis: on Redis Cluster, every node the client
// knows. A file that cannot be read, or that Redis does not accept (such
// as a syntax error), is an error naming the file and carrying Redis's
// message: a start-up error. A node that restarts, or joins later, gets
// the script again when EVALSHA answers NOSCRIPT (rueidis sends EVAL
// then).
func (s *Store) LoadScript(ctx context.Context, file string) (*UserScript, error) {
	client, err := s.clientOrErr()
	if err != nil {
		return nil, fmt.Errorf("userscript: %s: %w", file, err)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("userscript: %s: %w", file, err)
	}
	sum := sha1.Sum(src)
	sha := hex.EncodeToString(sum[:])
	for addr, node := range client.Nodes() {
		got, err := node.Do(ctx, node.B().ScriptLoad().Script(string(src)).Build()).ToString()
		if err != nil {
			return nil, fmt.Errorf("userscript: load %s into %s: %w", file, addr, err)
		}
		if got != sha {
			return nil, fmt.Errorf("userscript: load %s into %s: Redis named it %s, want SHA-1 %s", file, addr, got, sha)
		}
	}
	return &UserScript{
		file: file,
		name: filepath.Base(file),
		lua:  rueidis.NewLuaScript(string(src)), // the operator's own file
		s:    s,
	}, nil
}

// Name returns the base name of the script's file: the name a check by
// it goes by.
func (u *UserScript) Name() string { return u.name }

// Run runs the script once with EVALSHA (EVAL after NOSCRIPT) and returns
// its reply (store.Script). A Redis error, such as a runtime error in the
// script, names the script.
func (u *UserScript) Run(ctx context.Context, keys, args []string) (any, error) {
	c, err := u.s.clientOrErr()
	if err != nil {
		return nil, fmt.Errorf("userscript: %s: %w", u.file, err)
	}
	m, err := u.lua.Exec(ctx, c, keys, args).ToMessage()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("userscript: %s: %w", u.file, err)
	}
	return value(&m), nil
}

// value returns a reply as Go values (store.Script.Run).
func value(m *rueidis.RedisMessage) any {
	switch {
	case m.IsNil():
		return nil
	case m.IsInt64():
		v, _ := m.ToInt64()
		return v
	case m.IsString():
		v, _ := m.ToString()
		return v
	case m.IsArray():
		a, _ := m.ToArray()
		out := make([]any, len(a))
		for i := range a {
			out[i] = value(&a[i])
		}
		return out
	case m.IsFloat64():
		v, _ := m.ToFloat64()
		return v
	case m.IsBool():
		v, _ := m.ToBool()
		return v
	case m.IsMap():
		kv, _ := m.AsMap()
		out := make(map[string]any, len(kv))
		for k, v := range kv {
			out[k] = value(&v)
		}
		return out
	}
	return nil
}
