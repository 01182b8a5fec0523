package parser

import (
	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/token"
)

// errSyntax is the library's syntax error (internal/errors.ErrSyntax).
func errSyntax(msg string, tk *token.Token) *yaml.SyntaxError {
	return &yaml.SyntaxError{Message: msg, Token: tk}
}
