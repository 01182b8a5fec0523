package server

// parseCheckFast decodes the common check body, {"path": [...], "cost": n},
// without reflection. It gives up (ok false) on anything unusual, such as
// escapes, non-ASCII bytes, meta, duplicate or unknown fields, or a value
// of another type, and the caller then decodes with parseCheckRequest,
// which also words the errors; when ok, the result is what
// parseCheckRequest would return (TestParseCheckFastAgrees and
// FuzzParseCheck check that). What it pays: bench/NOTES.md, "What each
// micro-optimisation pays".
func parseCheckFast(b []byte, path []string) (_ []string, cost int64, hasCost, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return path, 0, false, false
	}
	i = skipWS(b, i+1)
	seenPath := false
	if i < len(b) && b[i] == '}' {
		return path, 0, false, false // no path: let the slow path word it
	}
	for {
		key, j, ok := fastString(b, i)
		if !ok {
			return path, 0, false, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return path, 0, false, false
		}
		i = skipWS(b, i+1)
		switch key {
		case "path":
			if seenPath || i >= len(b) || b[i] != '[' {
				return path, 0, false, false
			}
			seenPath = true
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == ']' {
				return path, 0, false, false
			}
			for {
				s, j, ok := fastString(b, i)
				if !ok || s == "" || len(path) == maxPathSegments { // "": the slow path words the error
					return path, 0, false, false
				}
				path = append(path, s)
				i = skipWS(b, j)
				if i >= len(b) {
					return path, 0, false, false
				}
				if b[i] == ']' {
					i++
					break
				}
				if b[i] != ',' {
					return path, 0, false, false
				}
				i = skipWS(b, i+1)
			}
		case "cost":
			if hasCost {
				return path, 0, false, false
			}
			start := i
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				cost = cost*10 + int64(b[i]-'0')
				i++
			}
			n := i - start
			if n == 0 || n > 18 || n > 1 && b[start] == '0' || i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
				return path, 0, false, false
			}
			hasCost = true
		default:
			return path, 0, false, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return path, 0, false, false
		}
		if b[i] == '}' {
			i++
			break
		}
		if b[i] != ',' {
			return path, 0, false, false
		}
		i = skipWS(b, i+1)
	}
	if skipWS(b, i) != len(b) || !seenPath {
		return path, 0, false, false
	}
	return path, cost, hasCost, true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// fastString reads a JSON string of printable ASCII without escapes
// starting at b[i].
func fastString(b []byte, i int) (string, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return string(b[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", j, false
		}
	}
	return "", len(b), false
}
