package yamlfile

import "fmt"

// Bounds on a YAML text, checked by scan before the parser runs. Nesting
// is bounded by the parser itself (parser.MaxDepth), which stops before it
// goes deeper.
const (
	// MaxFileBytes bounds a YAML text: a file ReadFile reads, or the data
	// Parse and Decode take.
	MaxFileBytes = 4 << 20
	// maxTokens bounds the tokens of a text, as scan counts them: the
	// parser's memory is about 500 bytes a token.
	maxTokens = 1_000_000
)

// scan checks data against the bounds before the parser runs, allocating
// nothing: its size, then its tokens, counted high so that the parser's
// are never more: each of the characters []{},:"' is one, each run of
// other characters between spaces and those another, and one starting
// with &, *, ! or % two (a token of the library's scanner holds at least
// one character, and tokens share a run only as an anchor, alias, tag or
// directive and its name, or next to a quote; TestScanCountsHigh).
func scan(data []byte) (pos Position, msg string) {
	if len(data) > MaxFileBytes {
		return Position{Line: 1, Column: 1}, fmt.Sprintf("larger than %d MiB", MaxFileBytes>>20)
	}
	if n, pos := countTokens(data, maxTokens); n > maxTokens {
		return pos, fmt.Sprintf("file too large: more than %d tokens", maxTokens)
	}
	return Position{}, ""
}

// countTokens counts the tokens of data as scan does, stopping past limit,
// and returns where it stopped.
func countTokens(data []byte, limit int) (int, Position) {
	tokens, line, start := 0, 1, 0
	inRun := false
	for i, c := range data {
		switch c {
		case '\n':
			line, start = line+1, i+1
			inRun = false
			continue
		case ' ', '\t', '\r':
			inRun = false
			continue
		case '[', ']', '{', '}', ',', ':', '"', '\'':
			inRun = false
		case '&', '*', '!', '%':
			if !inRun { // an anchor, alias, tag or directive: its indicator and its name
				tokens++
			}
			fallthrough
		default:
			if inRun {
				continue
			}
			inRun = true
		}
		tokens++
		if tokens > limit {
			return tokens, Position{Line: line, Column: i - start + 1}
		}
	}
	return tokens, Position{}
}
