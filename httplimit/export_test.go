package httplimit

// ParseReply reads a script's reply by the contract, for the tests of
// package httplimit_test: the verdict and the headers, as name and value.
func ParseReply(script string, names []string, v any) (allow bool, headers [][2]string, err error) {
	names, err = headerNames(names)
	if err != nil {
		return false, nil, err
	}
	rep, err := parseReply(script, names, v)
	for _, h := range rep.headers {
		headers = append(headers, [2]string{h.name, h.value})
	}
	return rep.allow, headers, err
}

// The ways a reply breaks the contract, for the tests of package
// httplimit_test.
var (
	ErrReplyShape   = errReplyShape
	ErrReplyVerdict = errReplyVerdict
	ErrReplyValues  = errReplyValues
	ErrReplyHeader  = errReplyHeader
)
