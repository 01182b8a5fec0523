package parser

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/token"
)

// Mode is the library's parse mode: Sluice's fork knows only 0 (the
// library's ParseComments, which kept comments in the tree, is gone, as
// nothing of Sluice reads a comment).
type Mode uint

// ParseBytes parse from byte slice, and returns ast.File. A key given twice
// in one mapping is kept (Sluice's loader reports it, with both positions).
func ParseBytes(bytes []byte, _ Mode) (*ast.File, error) {
	return Parse(lexer.Tokenize(string(bytes)))
}

// Parse parse from token instances, and returns ast.File
func Parse(tokens token.Tokens) (*ast.File, error) {
	if tk := tokens.InvalidToken(); tk != nil {
		return nil, errSyntax(tk.Error, tk)
	}
	p, err := newParser(tokens)
	if err != nil {
		return nil, err
	}
	return p.parse(newContext())
}

type YAMLVersion string

const (
	YAML10 YAMLVersion = "1.0"
	YAML11 YAMLVersion = "1.1"
	YAML12 YAMLVersion = "1.2"
	YAML13 YAMLVersion = "1.3"
)

var yamlVersionMap = map[string]YAMLVersion{
	"1.0": YAML10,
	"1.1": YAML11,
	"1.2": YAML12,
	"1.3": YAML13,
}

type parser struct {
	tokens                []*Token
	yamlVersion           YAMLVersion
	secondaryTagDirective *ast.DirectiveNode
	depth                 int // parseToken calls open
}

// newParser parses tokens without their comments (see Mode).
func newParser(tokens token.Tokens) (*parser, error) {
	filteredTokens := []*token.Token{}
	for _, tk := range tokens {
		if tk.Type != token.CommentType {
			filteredTokens = append(filteredTokens, tk)
		}
	}
	tks, err := CreateGroupedTokens(token.Tokens(filteredTokens))
	if err != nil {
		return nil, err
	}
	return &parser{tokens: tks}, nil
}

func (p *parser) parse(ctx *context) (*ast.File, error) {
	file := &ast.File{Docs: []*ast.DocumentNode{}}
	for _, token := range p.tokens {
		doc, err := p.parseDocument(ctx, token.Group)
		if err != nil {
			return nil, err
		}
		file.Docs = append(file.Docs, doc)
	}
	return file, nil
}

func (p *parser) parseDocument(ctx *context, docGroup *TokenGroup) (*ast.DocumentNode, error) {
	if len(docGroup.Tokens) == 0 {
		return ast.Document(docGroup.RawToken(), nil), nil
	}

	var (
		tokens = docGroup.Tokens
		start  *token.Token
		end    *token.Token
	)
	if docGroup.First().Type() == token.DocumentHeaderType {
		start = docGroup.First().RawToken()
		tokens = tokens[1:]
	}
	if docGroup.Last().Type() == token.DocumentEndType {
		end = docGroup.Last().RawToken()
		tokens = tokens[:len(tokens)-1]
		defer func() {
			// clear yaml version value if DocumentEnd token (...) is specified.
			p.yamlVersion = ""
		}()
	}

	if len(tokens) == 0 {
		return ast.Document(docGroup.RawToken(), nil), nil
	}

	body, err := p.parseDocumentBody(ctx.withGroup(&TokenGroup{
		Type:   TokenGroupDocumentBody,
		Tokens: tokens,
	}))
	if err != nil {
		return nil, err
	}
	node := ast.Document(start, body)
	node.End = end
	return node, nil
}

func (p *parser) parseDocumentBody(ctx *context) (ast.Node, error) {
	node, err := p.parseToken(ctx, ctx.currentToken())
	if err != nil {
		return nil, err
	}
	if ctx.next() {
		return nil, errSyntax("value is not allowed in this context", ctx.currentToken().RawToken())
	}
	return node, nil
}

// MaxDepth bounds the nodes the parser has open at once (Sluice's fork;
// goccy/go-yaml#902): a text nested deeper is a syntax error, found before
// the parser goes deeper, so that its recursion (and the loader's after
// it) stays shallow.
const MaxDepth = 256

func (p *parser) parseToken(ctx *context, tk *Token) (ast.Node, error) {
	if p.depth >= MaxDepth {
		return nil, errSyntax(fmt.Sprintf("nested deeper than %d lists, mappings, anchors and tags", MaxDepth), tk.RawToken())
	}
	p.depth++
	defer func() { p.depth-- }()
	switch tk.GroupType() {
	case TokenGroupMapKey, TokenGroupMapKeyValue:
		return p.parseMap(ctx)
	case TokenGroupDirective:
		node, err := p.parseDirective(ctx.withGroup(tk.Group), tk.Group)
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		return node, nil
	case TokenGroupDirectiveName:
		node, err := p.parseDirectiveName(ctx.withGroup(tk.Group))
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		return node, nil
	case TokenGroupAnchor:
		node, err := p.parseAnchor(ctx.withGroup(tk.Group), tk.Group)
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		return node, nil
	case TokenGroupAnchorName:
		anchor, err := p.parseAnchorName(ctx.withGroup(tk.Group))
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		if ctx.isTokenNotFound() {
			return nil, errSyntax("could not find anchor value", tk.RawToken())
		}
		value, err := p.parseToken(ctx, ctx.currentToken())
		if err != nil {
			return nil, err
		}
		if _, ok := value.(*ast.AnchorNode); ok {
			return nil, errSyntax("anchors cannot be used consecutively", value.GetToken())
		}
		anchor.Value = value
		return anchor, nil
	case TokenGroupAlias:
		node, err := p.parseAlias(ctx.withGroup(tk.Group))
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		return node, nil
	case TokenGroupLiteral, TokenGroupFolded:
		node, err := p.parseLiteral(ctx.withGroup(tk.Group))
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		return node, nil
	case TokenGroupScalarTag:
		node, err := p.parseTag(ctx.withGroup(tk.Group))
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		return node, nil
	}
	switch tk.Type() {
	case token.TagType:
		return p.parseTag(ctx)
	case token.MappingStartType:
		return p.parseFlowMap(ctx.withFlow(true))
	case token.SequenceStartType:
		return p.parseFlowSequence(ctx.withFlow(true))
	case token.SequenceEntryType:
		return p.parseSequence(ctx)
	case token.SequenceEndType:
		// SequenceEndType is always validated in parseFlowSequence.
		// Therefore, if this is found in other cases, it is treated as a syntax error.
		return nil, errSyntax("could not find '[' character corresponding to ']'", tk.RawToken())
	case token.MappingEndType:
		// MappingEndType is always validated in parseFlowMap.
		// Therefore, if this is found in other cases, it is treated as a syntax error.
		return nil, errSyntax("could not find '{' character corresponding to '}'", tk.RawToken())
	case token.MappingValueType:
		return nil, errSyntax("found an invalid key for this map", tk.RawToken())
	}
	node, err := p.parseScalarValue(ctx, tk)
	if err != nil {
		return nil, err
	}
	ctx.goNext()
	return node, nil
}

func (p *parser) parseScalarValue(ctx *context, tk *Token) (ast.ScalarNode, error) {
	if tk.Group != nil {
		switch tk.GroupType() {
		case TokenGroupAnchor:
			return p.parseAnchor(ctx.withGroup(tk.Group), tk.Group)
		case TokenGroupAnchorName:
			anchor, err := p.parseAnchorName(ctx.withGroup(tk.Group))
			if err != nil {
				return nil, err
			}
			ctx.goNext()
			if ctx.isTokenNotFound() {
				return nil, errSyntax("could not find anchor value", tk.RawToken())
			}
			value, err := p.parseToken(ctx, ctx.currentToken())
			if err != nil {
				return nil, err
			}
			if _, ok := value.(*ast.AnchorNode); ok {
				return nil, errSyntax("anchors cannot be used consecutively", value.GetToken())
			}
			anchor.Value = value
			return anchor, nil
		case TokenGroupAlias:
			return p.parseAlias(ctx.withGroup(tk.Group))
		case TokenGroupLiteral, TokenGroupFolded:
			return p.parseLiteral(ctx.withGroup(tk.Group))
		case TokenGroupScalarTag:
			return p.parseTag(ctx.withGroup(tk.Group))
		default:
			return nil, errSyntax("unexpected scalar value", tk.RawToken())
		}
	}
	switch tk.Type() {
	case token.MergeKeyType:
		return newMergeKeyNode(ctx, tk), nil
	case token.NullType, token.ImplicitNullType:
		return newNullNode(ctx, tk), nil
	case token.BoolType:
		return newBoolNode(ctx, tk), nil
	case token.IntegerType, token.BinaryIntegerType, token.OctetIntegerType, token.HexIntegerType:
		return newIntegerNode(ctx, tk), nil
	case token.FloatType:
		return newFloatNode(ctx, tk), nil
	case token.InfinityType:
		return newInfinityNode(ctx, tk), nil
	case token.NanType:
		return newNanNode(ctx, tk), nil
	case token.StringType, token.SingleQuoteType, token.DoubleQuoteType:
		return newStringNode(ctx, tk), nil
	case token.TagType:
		// this case applies when it is a scalar tag and its value does not exist.
		// Examples of cases where the value does not exist include cases like `key: !!str,` or `!!str : value`.
		return p.parseScalarTag(ctx)
	}
	return nil, errSyntax("unexpected scalar value type", tk.RawToken())
}

func (p *parser) parseFlowMap(ctx *context) (*ast.MappingNode, error) {
	node := newMappingNode(ctx, ctx.currentToken(), true)
	ctx.goNext() // skip MappingStart token

	isFirst := true
	for ctx.next() {
		tk := ctx.currentToken()
		if tk.Type() == token.MappingEndType {
			node.End = tk.RawToken()
			break
		}

		var entryTk *Token
		if tk.Type() == token.CollectEntryType {
			entryTk = tk
			ctx.goNext()
		} else if !isFirst {
			return nil, errSyntax("',' or '}' must be specified", tk.RawToken())
		}

		if tk := ctx.currentToken(); tk.Type() == token.MappingEndType {
			// this case is here: "{ elem, }".
			// In this case, ignore the last element and break mapping parsing.
			node.End = tk.RawToken()
			break
		}

		mapKeyTk := ctx.currentToken()
		switch mapKeyTk.GroupType() {
		case TokenGroupMapKeyValue:
			value, err := p.parseMapKeyValue(ctx.withGroup(mapKeyTk.Group), mapKeyTk.Group, entryTk)
			if err != nil {
				return nil, err
			}
			node.Values = append(node.Values, value)
			ctx.goNext()
		case TokenGroupMapKey:
			key, err := p.parseMapKey(ctx.withGroup(mapKeyTk.Group), mapKeyTk.Group)
			if err != nil {
				return nil, err
			}
			ctx := ctx.withChild(p.mapKeyText(key))
			colonTk := mapKeyTk.Group.Last()
			if p.isFlowMapDelim(ctx.nextToken()) {
				value := newNullNode(ctx, ctx.insertNullToken(colonTk))
				mapValue := newMappingValueNode(ctx, colonTk, entryTk, key, value)
				node.Values = append(node.Values, mapValue)
				ctx.goNext()
			} else {
				ctx.goNext()
				if ctx.isTokenNotFound() {
					return nil, errSyntax("could not find map value", colonTk.RawToken())
				}
				value, err := p.parseToken(ctx, ctx.currentToken())
				if err != nil {
					return nil, err
				}
				mapValue := newMappingValueNode(ctx, colonTk, entryTk, key, value)
				node.Values = append(node.Values, mapValue)
			}
		default:
			if !p.isFlowMapDelim(ctx.nextToken()) {
				errTk := mapKeyTk
				if errTk == nil {
					errTk = tk
				}
				return nil, errSyntax("could not find flow map content", errTk.RawToken())
			}
			key, err := p.parseScalarValue(ctx, mapKeyTk)
			if err != nil {
				return nil, err
			}
			value := newNullNode(ctx, ctx.insertNullToken(mapKeyTk))
			mapValue := newMappingValueNode(ctx, mapKeyTk, entryTk, key, value)
			node.Values = append(node.Values, mapValue)
			ctx.goNext()
		}
		isFirst = false
	}
	if node.End == nil {
		return nil, errSyntax("could not find flow mapping end token '}'", node.Start)
	}

	ctx.goNext() // skip mapping end token.
	return node, nil
}

func (p *parser) isFlowMapDelim(tk *Token) bool {
	return tk.Type() == token.MappingEndType || tk.Type() == token.CollectEntryType
}

// parseMap parses a block mapping one entry after another (Sluice's fork:
// the library recursed once per entry, each level copying the entries
// after it, so that a mapping of n keys took n² memory and n stack frames;
// goccy/go-yaml#889). It keeps the library's behaviour, "}" included:
// each entry opened a level, and a "}" at the keys' column closed one.
func (p *parser) parseMap(ctx *context) (*ast.MappingNode, error) {
	keyTk := ctx.currentToken()
	first, err := p.parseMapEntry(ctx)
	if err != nil {
		return nil, err
	}
	mapNode := newMappingNode(ctx, &Token{Token: first.GetToken()}, false, first)
	tk := ctx.currentToken()
	open := 0 // the levels the library's recursion would have open
	for tk.Column() == keyTk.Column() {
		typ := tk.Type()
		if ctx.isFlow && typ == token.SequenceEndType {
			// [
			// key: value
			// ] <=
			break
		}
		if !p.isMapToken(tk) {
			return nil, errSyntax("non-map value is specified", tk.RawToken())
		}
		if typ == token.MappingEndType {
			// a: {
			//  b: c
			// } <=
			ctx.goNext()
			if open == 0 {
				break
			}
			open--
			tk = ctx.currentToken()
			continue
		}
		node, err := p.parseMapEntry(ctx)
		if err != nil {
			return nil, err
		}
		mapNode.Values = append(mapNode.Values, node)
		open++
		tk = ctx.currentToken()
	}
	return mapNode, nil
}

// parseMapEntry parses one entry of a block mapping.
func (p *parser) parseMapEntry(ctx *context) (*ast.MappingValueNode, error) {
	keyTk := ctx.currentToken()
	if keyTk.Group == nil {
		return nil, errSyntax("unexpected map key", keyTk.RawToken())
	}
	var keyValueNode *ast.MappingValueNode
	if keyTk.GroupType() == TokenGroupMapKeyValue {
		node, err := p.parseMapKeyValue(ctx.withGroup(keyTk.Group), keyTk.Group, nil)
		if err != nil {
			return nil, err
		}
		keyValueNode = node
		ctx.goNext()
		if err := p.validateMapKeyValueNextToken(ctx, keyTk, ctx.currentToken()); err != nil {
			return nil, err
		}
	} else {
		key, err := p.parseMapKey(ctx.withGroup(keyTk.Group), keyTk.Group)
		if err != nil {
			return nil, err
		}
		ctx.goNext()

		valueTk := ctx.currentToken()
		if keyTk.Line() == valueTk.Line() && valueTk.Type() == token.SequenceEntryType {
			return nil, errSyntax("block sequence entries are not allowed in this context", valueTk.RawToken())
		}
		ctx := ctx.withChild(p.mapKeyText(key))
		value, err := p.parseMapValue(ctx, key, keyTk.Group.Last())
		if err != nil {
			return nil, err
		}
		node := newMappingValueNode(ctx, keyTk.Group.Last(), nil, key, value)
		keyValueNode = node
	}
	return keyValueNode, nil
}

func (p *parser) validateMapKeyValueNextToken(ctx *context, keyTk, tk *Token) error {
	if tk == nil {
		return nil
	}
	if tk.Column() <= keyTk.Column() {
		return nil
	}
	if ctx.isFlow && (tk.Type() == token.CollectEntryType || tk.Type() == token.SequenceEndType) {
		return nil
	}
	// a: b
	//  c <= this token is invalid.
	return errSyntax("value is not allowed in this context. map key-value is pre-defined", tk.RawToken())
}

func (p *parser) isMapToken(tk *Token) bool {
	if tk.Group == nil {
		return tk.Type() == token.MappingStartType || tk.Type() == token.MappingEndType
	}
	g := tk.Group
	return g.Type == TokenGroupMapKey || g.Type == TokenGroupMapKeyValue
}

func (p *parser) parseMapKeyValue(ctx *context, g *TokenGroup, entryTk *Token) (*ast.MappingValueNode, error) {
	if g.Type != TokenGroupMapKeyValue {
		return nil, errSyntax("unexpected map key-value pair", g.RawToken())
	}
	if g.First().Group == nil {
		return nil, errSyntax("unexpected map key", g.RawToken())
	}
	keyGroup := g.First().Group
	key, err := p.parseMapKey(ctx.withGroup(keyGroup), keyGroup)
	if err != nil {
		return nil, err
	}

	c := ctx.withChild(p.mapKeyText(key))
	value, err := p.parseToken(c, g.Last())
	if err != nil {
		return nil, err
	}
	return newMappingValueNode(c, keyGroup.Last(), entryTk, key, value), nil
}

func (p *parser) parseMapKey(ctx *context, g *TokenGroup) (ast.MapKeyNode, error) {
	if g.Type != TokenGroupMapKey {
		return nil, errSyntax("unexpected map key", g.RawToken())
	}
	if g.First().Type() == token.MappingKeyType {
		mapKeyTk := g.First()
		if mapKeyTk.Group != nil {
			ctx = ctx.withGroup(mapKeyTk.Group)
		}
		key := newMappingKeyNode(ctx, mapKeyTk)
		ctx.goNext() // skip mapping key token
		if ctx.isTokenNotFound() {
			return nil, errSyntax("could not find value for mapping key", mapKeyTk.RawToken())
		}

		scalar, err := p.parseScalarValue(ctx, ctx.currentToken())
		if err != nil {
			return nil, err
		}
		key.Value = scalar
		keyText := p.mapKeyText(scalar)
		keyPath := ctx.withChild(keyText).path
		key.SetPath(keyPath)
		if err := p.validateMapKey(ctx, key.GetToken(), keyPath, g.Last()); err != nil {
			return nil, err
		}
		return key, nil
	}
	if g.Last().Type() != token.MappingValueType {
		return nil, errSyntax("expected map key-value delimiter ':'", g.Last().RawToken())
	}

	scalar, err := p.parseScalarValue(ctx, g.First())
	if err != nil {
		return nil, err
	}
	key, ok := scalar.(ast.MapKeyNode)
	if !ok {
		return nil, errSyntax("cannot take map-key node", scalar.GetToken())
	}
	keyText := p.mapKeyText(key)
	keyPath := ctx.withChild(keyText).path
	key.SetPath(keyPath)
	if err := p.validateMapKey(ctx, key.GetToken(), keyPath, g.Last()); err != nil {
		return nil, err
	}
	return key, nil
}

func (p *parser) validateMapKey(ctx *context, tk *token.Token, keyPath string, colonTk *Token) error {
	origin := p.removeLeftWhiteSpace(tk.Origin)
	if ctx.isFlow {
		if tk.Type == token.StringType {
			origin = p.removeRightWhiteSpace(origin)
			if tk.Position.Line+p.newLineCharacterNum(origin) != colonTk.Line() {
				return errSyntax("map key definition includes an implicit line break", tk)
			}
		}
		return nil
	}
	if tk.Type != token.StringType && tk.Type != token.SingleQuoteType && tk.Type != token.DoubleQuoteType {
		return nil
	}
	if p.existsNewLineCharacter(origin) {
		return errSyntax("unexpected key name", tk)
	}
	return nil
}

func (p *parser) removeLeftWhiteSpace(src string) string {
	// CR or LF or CRLF
	return strings.TrimLeftFunc(src, func(r rune) bool {
		return r == ' ' || r == '\r' || r == '\n'
	})
}

func (p *parser) removeRightWhiteSpace(src string) string {
	// CR or LF or CRLF
	return strings.TrimRightFunc(src, func(r rune) bool {
		return r == ' ' || r == '\r' || r == '\n'
	})
}

func (p *parser) existsNewLineCharacter(src string) bool {
	return p.newLineCharacterNum(src) > 0
}

func (p *parser) newLineCharacterNum(src string) int {
	var num int
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '\r':
			if len(src) > i+1 && src[i+1] == '\n' {
				i++
			}
			num++
		case '\n':
			num++
		}
	}
	return num
}

func (p *parser) mapKeyText(n ast.Node) string {
	if n == nil {
		return ""
	}
	switch nn := n.(type) {
	case *ast.MappingKeyNode:
		return p.mapKeyText(nn.Value)
	case *ast.TagNode:
		return p.mapKeyText(nn.Value)
	case *ast.AnchorNode:
		return p.mapKeyText(nn.Value)
	case *ast.AliasNode:
		return ""
	}
	return n.GetToken().Value
}

func (p *parser) parseMapValue(ctx *context, key ast.MapKeyNode, colonTk *Token) (ast.Node, error) {
	keyCol := key.GetToken().Position.Column
	keyLine := key.GetToken().Position.Line
	if tk := ctx.currentToken(); tk != nil && tk.Column() != keyCol && tk.Line() == keyLine && (tk.GroupType() == TokenGroupMapKey || tk.GroupType() == TokenGroupMapKeyValue) {
		// a: b:
		//    ^
		//
		// a: b: c
		//    ^
		return nil, errSyntax("mapping value is not allowed in this context", tk.RawToken())
	}
	return p.parseValue(ctx, colonTk, keyLine, keyCol, p.isMapToken, "")
}

func (p *parser) parseSequenceValue(ctx *context, seqTk *Token) (ast.Node, error) {
	isEntry := func(tk *Token) bool { return tk.Type() == token.SequenceEntryType }
	return p.parseValue(ctx, seqTk, seqTk.Line(), seqTk.Column(), isEntry, " sequence")
}

// parseValue parses the value of a mapping key or a sequence entry (at,
// its colon or dash; the key or entry on line at column col; Sluice's
// fork: the library wrote it twice, in parseMapValue and
// parseSequenceValue): sibling says whether a token starts the next key or
// entry, where (" sequence" or "") words the errors.
func (p *parser) parseValue(ctx *context, at *Token, line, col int, sibling func(*Token) bool, where string) (ast.Node, error) {
	tk := ctx.currentToken()
	if tk == nil {
		return newNullNode(ctx, ctx.addNullValueToken(at)), nil
	}

	if tk.Column() == col && sibling(tk) {
		// in this case,
		// ----
		// key: <value does not defined>
		// next
		return newNullNode(ctx, ctx.insertNullToken(at)), nil
	}

	if tk.Line() == line && tk.GroupType() == TokenGroupAnchorName &&
		ctx.nextToken().Column() == col && sibling(ctx.nextToken()) {
		// in this case,
		// ----
		// key: &anchor
		// next
		return p.parseNullAnchor(ctx, tk)
	}

	if tk.Column() <= col && tk.GroupType() == TokenGroupAnchorName {
		// key: <value does not defined>
		// &anchor
		return nil, errSyntax("anchor is not allowed in this"+where+" context", tk.RawToken())
	}
	if tk.Column() <= col && tk.Type() == token.TagType {
		// key: <value does not defined>
		// !!tag
		return nil, errSyntax("tag is not allowed in this"+where+" context", tk.RawToken())
	}

	if tk.Column() < col {
		// in this case,
		// ----
		//   key: <value does not defined>
		// next
		return newNullNode(ctx, ctx.insertNullToken(at)), nil
	}

	if tk.Line() == line && tk.GroupType() == TokenGroupAnchorName &&
		ctx.nextToken().Column() < col {
		// in this case,
		// ----
		//   key: &anchor
		// next
		return p.parseNullAnchor(ctx, tk)
	}

	value, err := p.parseToken(ctx, ctx.currentToken())
	if err != nil {
		return nil, err
	}
	if err := p.validateAnchorValueInMapOrSeq(value, col); err != nil {
		return nil, err
	}
	return value, nil
}

// parseNullAnchor parses an anchor with no value, tk, as the anchor of an
// implicit null.
func (p *parser) parseNullAnchor(ctx *context, tk *Token) (ast.Node, error) {
	group := &TokenGroup{
		Type:   TokenGroupAnchor,
		Tokens: []*Token{tk, ctx.createImplicitNullToken(tk)},
	}
	anchor, err := p.parseAnchor(ctx.withGroup(group), group)
	if err != nil {
		return nil, err
	}
	ctx.goNext()
	return anchor, nil
}

func (p *parser) validateAnchorValueInMapOrSeq(value ast.Node, col int) error {
	anchor, ok := value.(*ast.AnchorNode)
	if !ok {
		return nil
	}
	tag, ok := anchor.Value.(*ast.TagNode)
	if !ok {
		return nil
	}
	anchorTk := anchor.GetToken()
	tagTk := tag.GetToken()

	if anchorTk.Position.Line == tagTk.Position.Line {
		// key:
		//   &anchor !!tag
		//
		// - &anchor !!tag
		return nil
	}

	if tagTk.Position.Column <= col {
		// key: &anchor
		// !!tag
		//
		// - &anchor
		// !!tag
		return errSyntax("tag is not allowed in this context", tagTk)
	}
	return nil
}

func (p *parser) parseAnchor(ctx *context, g *TokenGroup) (*ast.AnchorNode, error) {
	anchorNameGroup := g.First().Group
	anchor, err := p.parseAnchorName(ctx.withGroup(anchorNameGroup))
	if err != nil {
		return nil, err
	}
	ctx.goNext()
	if ctx.isTokenNotFound() {
		return nil, errSyntax("could not find anchor value", anchor.GetToken())
	}

	value, err := p.parseToken(ctx, ctx.currentToken())
	if err != nil {
		return nil, err
	}
	if _, ok := value.(*ast.AnchorNode); ok {
		return nil, errSyntax("anchors cannot be used consecutively", value.GetToken())
	}
	anchor.Value = value
	return anchor, nil
}

func (p *parser) parseAnchorName(ctx *context) (*ast.AnchorNode, error) {
	anchor := newAnchorNode(ctx, ctx.currentToken())
	ctx.goNext()
	if ctx.isTokenNotFound() {
		return nil, errSyntax("could not find anchor value", anchor.GetToken())
	}

	anchorName, err := p.parseScalarValue(ctx, ctx.currentToken())
	if err != nil {
		return nil, err
	}
	if anchorName == nil {
		return nil, errSyntax("unexpected anchor. anchor name is not scalar value", ctx.currentToken().RawToken())
	}
	anchor.Name = anchorName
	return anchor, nil
}

func (p *parser) parseAlias(ctx *context) (*ast.AliasNode, error) {
	alias := newAliasNode(ctx, ctx.currentToken())
	ctx.goNext()
	if ctx.isTokenNotFound() {
		return nil, errSyntax("could not find alias value", alias.GetToken())
	}

	aliasName, err := p.parseScalarValue(ctx, ctx.currentToken())
	if err != nil {
		return nil, err
	}
	if aliasName == nil {
		return nil, errSyntax("unexpected alias. alias name is not scalar value", ctx.currentToken().RawToken())
	}
	alias.Value = aliasName
	return alias, nil
}

func (p *parser) parseLiteral(ctx *context) (*ast.LiteralNode, error) {
	node := newLiteralNode(ctx, ctx.currentToken())
	ctx.goNext() // skip literal/folded token

	tk := ctx.currentToken()
	if tk == nil {
		value := newStringNode(ctx, &Token{Token: token.New("", "", node.Start.Position)})
		node.Value = value
		return node, nil
	}
	value, err := p.parseToken(ctx, tk)
	if err != nil {
		return nil, err
	}
	str, ok := value.(*ast.StringNode)
	if !ok {
		return nil, errSyntax("unexpected token. required string token", value.GetToken())
	}
	node.Value = str
	return node, nil
}

func (p *parser) parseScalarTag(ctx *context) (*ast.TagNode, error) {
	tag, err := p.parseTag(ctx)
	if err != nil {
		return nil, err
	}
	if tag.Value == nil {
		return nil, errSyntax("specified not scalar tag", tag.GetToken())
	}
	if _, ok := tag.Value.(ast.ScalarNode); !ok {
		return nil, errSyntax("specified not scalar tag", tag.GetToken())
	}
	return tag, nil
}

func (p *parser) parseTag(ctx *context) (*ast.TagNode, error) {
	tagTk := ctx.currentToken()
	tagRawTk := tagTk.RawToken()
	node := newTagNode(ctx, tagTk)
	ctx.goNext()

	var tagValue ast.Node
	if p.secondaryTagDirective != nil {
		value := newStringNode(ctx, ctx.currentToken())
		tagValue = value
		node.Directive = p.secondaryTagDirective
	} else {
		value, err := p.parseTagValue(ctx, tagRawTk, ctx.currentToken())
		if err != nil {
			return nil, err
		}
		tagValue = value
	}
	node.Value = tagValue
	return node, nil
}

func (p *parser) parseTagValue(ctx *context, tagRawTk *token.Token, tk *Token) (ast.Node, error) {
	if tk == nil {
		return newNullNode(ctx, ctx.createImplicitNullToken(&Token{Token: tagRawTk})), nil
	}
	switch token.ReservedTagKeyword(tagRawTk.Value) {
	case token.MappingTag, token.SetTag:
		if !p.isMapToken(tk) {
			return nil, errSyntax("could not find map", tk.RawToken())
		}
		if tk.Type() == token.MappingStartType {
			return p.parseFlowMap(ctx.withFlow(true))
		}
		return p.parseMap(ctx)
	case token.IntegerTag, token.FloatTag, token.StringTag, token.BinaryTag, token.TimestampTag, token.BooleanTag, token.NullTag:
		if tk.GroupType() == TokenGroupLiteral || tk.GroupType() == TokenGroupFolded {
			return p.parseLiteral(ctx.withGroup(tk.Group))
		} else if tk.Type() == token.CollectEntryType || tk.Type() == token.MappingValueType {
			return newTagDefaultScalarValueNode(ctx, tagRawTk)
		}
		scalar, err := p.parseScalarValue(ctx, tk)
		if err != nil {
			return nil, err
		}
		ctx.goNext()
		return scalar, nil
	case token.SequenceTag, token.OrderedMapTag:
		if tk.Type() == token.SequenceStartType {
			return p.parseFlowSequence(ctx.withFlow(true))
		}
		return p.parseSequence(ctx)
	}
	return p.parseToken(ctx, tk)
}

func (p *parser) parseFlowSequence(ctx *context) (*ast.SequenceNode, error) {
	node := newSequenceNode(ctx, ctx.currentToken(), true)
	ctx.goNext() // skip SequenceStart token

	isFirst := true
	for ctx.next() {
		tk := ctx.currentToken()
		if tk.Type() == token.SequenceEndType {
			node.End = tk.RawToken()
			break
		}

		var entryTk *Token
		if tk.Type() == token.CollectEntryType {
			if isFirst {
				return nil, errSyntax("expected sequence element, but found ','", tk.RawToken())
			}
			entryTk = tk
			ctx.goNext()
		} else if !isFirst {
			return nil, errSyntax("',' or ']' must be specified", tk.RawToken())
		}

		if tk := ctx.currentToken(); tk.Type() == token.SequenceEndType {
			// this case is here: "[ elem, ]".
			// In this case, ignore the last element and break sequence parsing.
			node.End = tk.RawToken()
			break
		}

		if ctx.isTokenNotFound() {
			break
		}

		ctx := ctx.withIndex(uint(len(node.Values)))
		value, err := p.parseToken(ctx, ctx.currentToken())
		if err != nil {
			return nil, err
		}
		node.Values = append(node.Values, value)
		seqEntry := ast.SequenceEntry(entryTk.RawToken(), value, nil)
		seqEntry.SetPath(ctx.path)
		node.Entries = append(node.Entries, seqEntry)

		isFirst = false
	}
	if node.End == nil {
		return nil, errSyntax("sequence end token ']' not found", node.Start)
	}

	ctx.goNext() // skip sequence end token.
	return node, nil
}

func (p *parser) parseSequence(ctx *context) (*ast.SequenceNode, error) {
	seqTk := ctx.currentToken()
	seqNode := newSequenceNode(ctx, seqTk, false)

	tk := seqTk
	for tk.Type() == token.SequenceEntryType && tk.Column() == seqTk.Column() {
		seqTk := tk
		ctx.goNext() // skip sequence entry token

		ctx := ctx.withIndex(uint(len(seqNode.Values)))
		value, err := p.parseSequenceValue(ctx, seqTk)
		if err != nil {
			return nil, err
		}
		seqEntry := ast.SequenceEntry(seqTk.RawToken(), value, nil)
		seqEntry.SetPath(ctx.path)
		seqNode.ValueHeadComments = append(seqNode.ValueHeadComments, nil)
		seqNode.Values = append(seqNode.Values, value)
		seqNode.Entries = append(seqNode.Entries, seqEntry)
		tk = ctx.currentToken()
	}
	return seqNode, nil
}

func (p *parser) parseDirective(ctx *context, g *TokenGroup) (*ast.DirectiveNode, error) {
	directiveNameGroup := g.First().Group
	directive, err := p.parseDirectiveName(ctx.withGroup(directiveNameGroup))
	if err != nil {
		return nil, err
	}

	switch directive.Name.String() {
	case "YAML":
		if len(g.Tokens) != 2 {
			return nil, errSyntax("unexpected format YAML directive", g.First().RawToken())
		}
		valueTk := g.Tokens[1]
		valueRawTk := valueTk.RawToken()
		value := valueRawTk.Value
		ver, exists := yamlVersionMap[value]
		if !exists {
			return nil, errSyntax(fmt.Sprintf("unknown YAML version %q", value), valueRawTk)
		}
		if p.yamlVersion != "" {
			return nil, errSyntax("YAML version has already been specified", valueRawTk)
		}
		p.yamlVersion = ver
		versionNode := newStringNode(ctx, valueTk)
		directive.Values = append(directive.Values, versionNode)
	case "TAG":
		if len(g.Tokens) != 3 {
			return nil, errSyntax("unexpected format TAG directive", g.First().RawToken())
		}
		tagKey := newStringNode(ctx, g.Tokens[1])
		if tagKey.Value == "!!" {
			p.secondaryTagDirective = directive
		}
		tagValue := newStringNode(ctx, g.Tokens[2])
		directive.Values = append(directive.Values, tagKey, tagValue)
	default:
		if len(g.Tokens) > 1 {
			for _, tk := range g.Tokens[1:] {
				value := newStringNode(ctx, tk)
				directive.Values = append(directive.Values, value)
			}
		}
	}
	return directive, nil
}

func (p *parser) parseDirectiveName(ctx *context) (*ast.DirectiveNode, error) {
	directive := newDirectiveNode(ctx, ctx.currentToken())
	ctx.goNext()
	if ctx.isTokenNotFound() {
		return nil, errSyntax("could not find directive value", directive.GetToken())
	}

	directiveName, err := p.parseScalarValue(ctx, ctx.currentToken())
	if err != nil {
		return nil, err
	}
	if directiveName == nil {
		return nil, errSyntax("unexpected directive. directive name is not scalar value", ctx.currentToken().RawToken())
	}
	directive.Name = directiveName
	return directive, nil
}
