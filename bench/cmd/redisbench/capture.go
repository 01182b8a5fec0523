package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// capture returns the script command (EVALSHA or EVAL, as EVALSHA) that a
// client sends for one decision, seen through MONITOR: send must make the
// client run one decision on the Redis key named key. Replaying exactly
// that command with redis-benchmark measures "the same script" however the
// store builds its scripts and arguments.
func capture(addr, key string, send func() error) ([]string, error) {
	return captureWhere(addr, send, func(args []string) bool {
		return slices.ContainsFunc(args[3:], func(a string) bool { return isKey(a, key) })
	})
}

// captureWhere is capture of the first script command that match accepts.
func captureWhere(addr string, send func() error, match func(args []string) bool) ([]string, error) {
	m, err := dial(addr)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	if s, err := m.str("MONITOR"); err != nil || s != "OK" {
		return nil, fmt.Errorf("MONITOR: %q %v", s, err)
	}
	if err := send(); err != nil {
		return nil, err
	}
	m.c.SetDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 10000; i++ {
		line, err := m.rd.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("MONITOR: no such script call seen: %w", err)
		}
		line = strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "+")
		j := strings.Index(line, "] ")
		if j < 0 || strings.Contains(line[:j], " lua") {
			continue // not a client command, or a command the script ran
		}
		args, err := unrepr(line[j+2:])
		if err != nil || len(args) < 3 || !match(args) {
			continue
		}
		switch strings.ToUpper(args[0]) {
		case "EVALSHA", "EVALSHA_RO":
			return args, nil
		case "EVAL", "EVAL_RO":
			sha, err := admin(addr, "SCRIPT", "LOAD", args[1])
			if err != nil {
				return nil, err
			}
			return append([]string{"EVALSHA", sha}, args[2:]...), nil
		}
	}
	return nil, fmt.Errorf("MONITOR: no such script call among 10000 lines")
}

// admin runs one command on a fresh connection and returns a string reply.
func admin(addr string, args ...string) (string, error) {
	c, err := dial(addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.str(args...)
}

// withKey returns cmd with every argument equal to old replaced by new.
func withKey(cmd []string, old, new string) []string {
	out := slices.Clone(cmd)
	for i := 2; i < len(out); i++ {
		if isKey(out[i], old) {
			out[i] = new + out[i][len(old):]
		}
	}
	return out
}

// isKey reports whether a is the Redis key of key: key itself, or key
// with the store's state-shape suffix (redis.StateKey: "%:", the
// algorithm's name and the layout's numbers).
func isKey(a, key string) bool {
	return a == key || strings.HasPrefix(a, key+"%:")
}

// quote renders a command for a shell, for the tables.
func quote(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \"'$\\{}") {
			b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}
