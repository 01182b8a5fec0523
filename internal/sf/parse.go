package sf

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// ParseList is a strict parser of Lists of Items (RFC 9651 §4.2.1), written
// from the RFC's parsing algorithms, for tests to check that the fields
// written are valid and read back as what was meant. Inner Lists,
// Decimals, Dates and Display Strings are not needed here and fail.
func ParseList(s string) ([]Item, error) { return parseList(s) }

// Param is a parsed parameter.
type Param struct {
	Key string
	Val any
}

// Item is a parsed List member.
type Item struct {
	Val    any // int64, string (a String), Token, bool or []byte
	Params []Param
}

// Param returns the value of the parameter key, or nil.
func (it Item) Param(key string) any {
	for _, p := range it.Params {
		if p.Key == key {
			return p.Val
		}
	}
	return nil
}

// Token is a parsed Token, to tell it from a String.
type Token string

var errParse = errors.New("sf: parse error")

func parseList(s string) ([]Item, error) {
	p := &parser{s: s}
	p.skipSP()
	var out []Item
	for !p.eof() {
		it, err := p.item()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.fail("expected ','")
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, p.fail("trailing comma")
		}
	}
	return out, nil
}

type parser struct {
	s string
	i int
}

func (p *parser) eof() bool { return p.i >= len(p.s) }
func (p *parser) fail(msg string) error {
	return errors.Join(errParse, errors.New(msg+" at "+strconv.Itoa(p.i)+" in "+strconv.Quote(p.s)))
}
func (p *parser) skipSP() {
	for !p.eof() && p.s[p.i] == ' ' {
		p.i++
	}
}
func (p *parser) skipOWS() {
	for !p.eof() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *parser) item() (Item, error) {
	v, err := p.bareItem()
	if err != nil {
		return Item{}, err
	}
	it := Item{Val: v}
	for !p.eof() && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return Item{}, err
		}
		var pv any = true
		if !p.eof() && p.s[p.i] == '=' {
			p.i++
			if pv, err = p.bareItem(); err != nil {
				return Item{}, err
			}
		}
		replaced := false
		for j := range it.Params {
			if it.Params[j].Key == k {
				it.Params[j].Val, replaced = pv, true
			}
		}
		if !replaced {
			it.Params = append(it.Params, Param{k, pv})
		}
	}
	return it, nil
}

func (p *parser) key() (string, error) {
	if p.eof() || !(isLcalpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", p.fail("bad key start")
	}
	j := p.i
	for !p.eof() {
		c := p.s[p.i]
		if !isLcalpha(c) && !isDigit(c) && c != '_' && c != '-' && c != '.' && c != '*' {
			break
		}
		p.i++
	}
	return p.s[j:p.i], nil
}

func (p *parser) bareItem() (any, error) {
	if p.eof() {
		return nil, p.fail("empty bare item")
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.integer()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.tok(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	}
	return nil, p.fail("unknown bare item")
}

func (p *parser) integer() (any, error) {
	j := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	d := p.i
	for !p.eof() && isDigit(p.s[p.i]) {
		p.i++
	}
	if p.i == d {
		return nil, p.fail("no digits")
	}
	if !p.eof() && p.s[p.i] == '.' {
		return nil, p.fail("decimals are not expected")
	}
	if p.i-d > 15 {
		return nil, p.fail("integer longer than 15 digits")
	}
	v, err := strconv.ParseInt(p.s[j:p.i], 10, 64)
	if err != nil {
		return nil, p.fail(err.Error())
	}
	return v, nil
}

func (p *parser) str() (any, error) {
	p.i++ // '"'
	var b strings.Builder
	for !p.eof() {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.eof() {
				return nil, p.fail("backslash at end")
			}
			n := p.s[p.i]
			p.i++
			if n != '"' && n != '\\' {
				return nil, p.fail("bad escape")
			}
			b.WriteByte(n)
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.fail("non-printable byte in string")
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.fail("unterminated string")
}

func (p *parser) tok() any {
	j := p.i
	p.i++
	for !p.eof() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return Token(p.s[j:p.i])
}

func (p *parser) bytes() (any, error) {
	p.i++
	j := strings.IndexByte(p.s[p.i:], ':')
	if j < 0 {
		return nil, p.fail("unterminated byte sequence")
	}
	enc := p.s[p.i : p.i+j]
	for k := 0; k < len(enc); k++ {
		c := enc[k]
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return nil, p.fail("bad base64 byte")
		}
	}
	v, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, p.fail(err.Error())
	}
	p.i += j + 1
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

func (p *parser) boolean() (any, error) {
	if p.i+1 >= len(p.s) {
		return nil, p.fail("bad boolean")
	}
	c := p.s[p.i+1]
	p.i += 2
	switch c {
	case '1':
		return true, nil
	case '0':
		return false, nil
	}
	return nil, p.fail("bad boolean")
}
