package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// conn is a minimal RESP2 connection for set-up, inspection and MONITOR,
// independent of the client libraries under test.
type conn struct {
	c  net.Conn
	rd *bufio.Reader
}

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, rd: bufio.NewReader(c)}, nil
}

func (c *conn) Close() error { return c.c.Close() }

func (c *conn) send(args ...string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	c.c.SetDeadline(time.Now().Add(30 * time.Second))
	_, err := io.WriteString(c.c, b.String())
	return err
}

// do sends one command and reads its reply: string, int64, nil, []any, or
// an error for an error reply.
func (c *conn) do(args ...string) (any, error) {
	if err := c.send(args...); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *conn) read() (any, error) {
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.rd, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// str and integer run a command whose reply is a string or an integer.
func (c *conn) str(args ...string) (string, error) {
	v, err := c.do(args...)
	if err != nil {
		return "", fmt.Errorf("%s: %w", args[0], err)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s replied %v, want a string", args[0], v)
	}
	return s, nil
}

func (c *conn) integer(args ...string) (int64, error) {
	v, err := c.do(args...)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", args[0], err)
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%s replied %v, want an integer", args[0], v)
	}
	return n, nil
}

// info returns the fields of an INFO section.
func (c *conn) info(section string) (map[string]string, error) {
	s, err := c.str("INFO", section)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// cmdstat is one line of INFO commandstats.
type cmdstat struct {
	calls       int64
	usec        int64
	usecPerCall float64
}

func (c *conn) commandstats() (map[string]cmdstat, error) {
	m, err := c.info("commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]cmdstat{}
	for k, v := range m {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var cs cmdstat
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			switch fk {
			case "calls":
				cs.calls, _ = strconv.ParseInt(fv, 10, 64)
			case "usec":
				cs.usec, _ = strconv.ParseInt(fv, 10, 64)
			case "usec_per_call":
				cs.usecPerCall, _ = strconv.ParseFloat(fv, 64)
			}
		}
		out[name] = cs
	}
	return out, nil
}

// unrepr splits a MONITOR line's arguments, which Redis writes with
// sdscatrepr: double-quoted, with \\ \" \n \r \t \a \b and \xHH escapes.
func unrepr(s string) ([]string, error) {
	var out []string
	for i := 0; i < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		if s[i] != '"' {
			return nil, fmt.Errorf("unquoted argument at %d in %q", i, s)
		}
		i++
		var b strings.Builder
		for {
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated argument in %q", s)
			}
			c := s[i]
			if c == '"' {
				i++
				break
			}
			if c != '\\' {
				b.WriteByte(c)
				i++
				continue
			}
			if i+1 >= len(s) {
				return nil, fmt.Errorf("bad escape in %q", s)
			}
			switch e := s[i+1]; e {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+3 >= len(s) {
					return nil, fmt.Errorf("bad \\x escape in %q", s)
				}
				v, err := strconv.ParseUint(s[i+2:i+4], 16, 8)
				if err != nil {
					return nil, fmt.Errorf("bad \\x escape in %q", s)
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				b.WriteByte(e)
			}
			i += 2
		}
		out = append(out, b.String())
	}
	return out, nil
}
