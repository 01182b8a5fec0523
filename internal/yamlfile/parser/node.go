package parser

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

func newMappingNode(ctx *context, tk *Token, isFlow bool, values ...*ast.MappingValueNode) *ast.MappingNode {
	node := ast.Mapping(tk.RawToken(), isFlow, values...)
	node.SetPath(ctx.path)
	return node
}

func newMappingValueNode(ctx *context, colonTk, entryTk *Token, key ast.MapKeyNode, value ast.Node) *ast.MappingValueNode {
	node := ast.MappingValue(colonTk.RawToken(), key, value)
	node.SetPath(ctx.path)
	node.CollectEntry = entryTk.RawToken()
	return node
}

func newMappingKeyNode(ctx *context, tk *Token) *ast.MappingKeyNode {
	node := ast.MappingKey(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newAnchorNode(ctx *context, tk *Token) *ast.AnchorNode {
	node := ast.Anchor(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newAliasNode(ctx *context, tk *Token) *ast.AliasNode {
	node := ast.Alias(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newDirectiveNode(ctx *context, tk *Token) *ast.DirectiveNode {
	node := ast.Directive(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newMergeKeyNode(ctx *context, tk *Token) *ast.MergeKeyNode {
	node := ast.MergeKey(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newNullNode(ctx *context, tk *Token) *ast.NullNode {
	node := ast.Null(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newBoolNode(ctx *context, tk *Token) *ast.BoolNode {
	node := ast.Bool(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newIntegerNode(ctx *context, tk *Token) *ast.IntegerNode {
	node := ast.Integer(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newFloatNode(ctx *context, tk *Token) *ast.FloatNode {
	node := ast.Float(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newInfinityNode(ctx *context, tk *Token) *ast.InfinityNode {
	node := ast.Infinity(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newNanNode(ctx *context, tk *Token) *ast.NanNode {
	node := ast.Nan(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newStringNode(ctx *context, tk *Token) *ast.StringNode {
	node := ast.String(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newLiteralNode(ctx *context, tk *Token) *ast.LiteralNode {
	node := ast.Literal(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newTagNode(ctx *context, tk *Token) *ast.TagNode {
	node := ast.Tag(tk.RawToken())
	node.SetPath(ctx.path)
	return node
}

func newSequenceNode(ctx *context, tk *Token, isFlow bool) *ast.SequenceNode {
	node := ast.Sequence(tk.RawToken(), isFlow)
	node.SetPath(ctx.path)
	return node
}

func newTagDefaultScalarValueNode(ctx *context, tag *token.Token) (ast.ScalarNode, error) {
	pos := *(tag.Position)
	pos.Column++

	var (
		tk   *Token
		node ast.ScalarNode
	)
	switch token.ReservedTagKeyword(tag.Value) {
	case token.IntegerTag:
		tk = &Token{Token: token.New("0", "0", &pos)}
		node = newIntegerNode(ctx, tk)
	case token.FloatTag:
		tk = &Token{Token: token.New("0", "0", &pos)}
		node = newFloatNode(ctx, tk)
	case token.StringTag, token.BinaryTag, token.TimestampTag:
		tk = &Token{Token: token.New("", "", &pos)}
		node = newStringNode(ctx, tk)
	case token.BooleanTag:
		tk = &Token{Token: token.New("false", "false", &pos)}
		node = newBoolNode(ctx, tk)
	case token.NullTag:
		tk = &Token{Token: token.New("null", "null", &pos)}
		node = newNullNode(ctx, tk)
	default:
		return nil, errSyntax(fmt.Sprintf("cannot assign default value for %q tag", tag.Value), tag)
	}
	ctx.insertToken(tk)
	ctx.goNext()
	return node, nil
}
