package yamlfile

import (
	"fmt"
	"sort"
	"strings"
)

// Position is a place in a policy file. Line and Column start at 1.
type Position struct {
	Filename     string
	Line, Column int
}

// String returns "file:line:col".
func (p Position) String() string {
	return fmt.Sprintf("%s:%d:%d", p.Filename, p.Line, p.Column)
}

// Error is one problem found in a policy file.
type Error struct {
	// Pos is where the problem is.
	Pos Position
	// Field is the path of the field at fault, such as
	// "schema.user.children.*.limits[1].burst". It is empty for YAML syntax
	// errors.
	Field string
	// Msg describes the problem.
	Msg string
	// Err is the underlying error, if any: a limit's error wraps
	// algo.ErrInvalid.
	Err error
}

// Error returns "file:line:col: field: message".
func (e *Error) Error() string {
	if e.Field == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Field + ": " + e.Msg
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ErrorList is every problem found in a policy file, in the order of their
// positions. Parse and Load return an ErrorList, never empty, for an invalid
// file.
type ErrorList []*Error

// Error returns one line per problem.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// sort orders the list by position, keeping the order of problems found at
// one position.
func (l ErrorList) Sort() {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i].Pos, l[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}
