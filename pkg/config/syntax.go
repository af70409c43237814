package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	goccy "github.com/goccy/go-yaml"
	goccyparser "github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
	yaml "go.yaml.in/yaml/v3"
)

// parseYAML decodes the document, refusing a stream of several non-empty
// documents. An empty input is an empty document.
//
// go.yaml.in/yaml/v3 decides what is YAML, as it always has; when it
// refuses the input, syntaxError asks a second parser, which keeps every
// token's position, where the problem is (yaml.v3 often names the line
// where the enclosing block began).
func parseYAML(label string, data []byte) (any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root any
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, syntaxError(label, data, err)
	}
	// Each further Decode consumes at least one document marker, so the
	// input's length bounds the loop.
	for i := 0; i <= len(data); i++ {
		var extra any
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, syntaxError(label, data, err)
		}
		if extra != nil {
			ps := problems{}
			ps.add("", "must hold one YAML document, not several", "")
			return nil, ps.err(label)
		}
	}
	return root, nil
}

// syntaxError is the error for data that yaml.v3 refused with err. When
// goccy/go-yaml also refuses data and says where, it reads
//
//	LABEL:LINE:COL: YAML syntax error: MESSAGE
//	    4 |    admin: c
//	      |         ^
//
// and otherwise LABEL: YAML syntax error: yaml.v3's message. Both wrap
// ErrSyntax.
func syntaxError(label string, data []byte, err error) error {
	if line, col, msg, ok := locate(data); ok {
		return fmt.Errorf("%s:%d:%d: %w: %s\n%s", label, line, col, ErrSyntax, msg, quote(data, line, col))
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msg = strings.Join(te.Errors, "; ")
	}
	return fmt.Errorf("%s: %w: %s", label, ErrSyntax, msg)
}

// locate returns the 1-based line and column goccy/go-yaml reports for the
// first problem in data, and its message; ok is false when it finds none
// or cannot say where (then yaml.v3's message stands).
func locate(data []byte) (line, col int, msg string, ok bool) {
	defer func() {
		// A parser bug on outside input must not stop the daemon or a
		// reload: yaml.v3's message is still there to report.
		if recover() != nil {
			ok = false
		}
	}()
	_, err := goccyparser.ParseBytes(data, 0)
	var se *goccy.SyntaxError
	var de *goccy.DuplicateKeyError
	var tk *token.Token
	switch {
	case errors.As(err, &se):
		tk, msg = se.Token, se.Message
		// A ':' after a plain scalar that ran on to the next line (a key
		// indented too far) is reported at the scalar's start: the
		// problem is the ':'.
		if tk != nil && tk.Next != nil && tk.Next.Type == token.MappingValueType && strings.HasPrefix(msg, "mapping value is not allowed") {
			tk = tk.Next
		}
		// A flow mapping or sequence left open at the end of its line is
		// noticed where the next line's key begins: the problem is the
		// '{' or '[' that is not closed.
		if tk != nil && tk.Position != nil && strings.HasSuffix(msg, "must be specified") {
			if open := unclosed(tk); open != nil && open.Position != nil && open.Position.Line < tk.Position.Line {
				msg = fmt.Sprintf("%q is never closed (at %s: %s)", open.Value, at(tk), msg)
				tk = open
			}
		}
	case errors.As(err, &de):
		tk, msg = de.Token, de.Message
	default:
		return 0, 0, "", false
	}
	if tk == nil || tk.Position == nil || tk.Position.Line < 1 || tk.Position.Column < 1 {
		return 0, 0, "", false
	}
	line, col, ok = position(data, tk.Position)
	if !ok {
		return 0, 0, "", false
	}
	return line, col, bracketPos.ReplaceAllString(msg, "line $1, column $2"), true
}

// position returns pos's line and column, counted in characters from the
// start of its line, lines ending at "\n" (as the quote shows them). goccy
// counts a tab before the token as no column, and a lone "\r" as a line
// break, but its Offset (1-based, in characters) is right: position uses it.
// Without a usable Offset, goccy's own line and column are used if that line
// exists; ok is false otherwise.
func position(data []byte, pos *token.Position) (line, col int, ok bool) {
	runes := []rune(string(data))
	lines := strings.Count(string(data), "\n") + 1
	i := pos.Offset - 1
	if i < 0 || i > len(runes) {
		return pos.Line, pos.Column, pos.Line <= lines
	}
	line, start := 1, 0
	for j, r := range runes[:i] {
		if r == '\n' {
			line, start = line+1, j+1
		}
	}
	return line, i - start + 1, true
}

// bracketPos is goccy's "[LINE:COL]" in its messages.
var bracketPos = regexp.MustCompile(`\[(\d+):(\d+)\]`)

// at names tk's position (not nil) in a message.
func at(tk *token.Token) string {
	return fmt.Sprintf("line %d, column %d", tk.Position.Line, tk.Position.Column)
}

// unclosed returns the innermost '{' or '[' before tk that is not closed
// before it, or nil.
func unclosed(tk *token.Token) *token.Token {
	depth := 0
	for t := tk.Prev; t != nil; t = t.Prev {
		switch t.Type {
		case token.MappingEndType, token.SequenceEndType:
			depth++
		case token.MappingStartType, token.SequenceStartType:
			if depth == 0 {
				return t
			}
			depth--
		}
	}
	return nil
}

// quoteWidth bounds the characters of a quoted line; a longer one is cut
// to a window around the column, marked with "…" where it was cut.
const quoteWidth = 120

// quote returns line of data, numbered, and a caret under column col (a
// count of characters; the tabs before it are kept so that the caret
// lines up). It returns "" when data has no such line.
func quote(data []byte, line, col int) string {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	text := []rune(strings.TrimRight(lines[line-1], "\r"))
	col = min(max(col, 1), len(text)+1)
	head, tail := "", ""
	if len(text) > quoteWidth {
		start := max(0, min(col-1-quoteWidth/2, len(text)-quoteWidth))
		end := start + quoteWidth
		if start > 0 {
			head = "…"
		}
		if end < len(text) {
			tail = "…"
		}
		text, col = text[start:end], col-start
	}
	var pad strings.Builder
	if head != "" {
		pad.WriteByte(' ')
	}
	for _, r := range text[:col-1] {
		if r == '\t' {
			pad.WriteByte('\t')
		} else {
			pad.WriteByte(' ')
		}
	}
	num := fmt.Sprintf("%5d | ", line)
	return fmt.Sprintf("%s%s%s%s\n%s| %s^", num, head, string(text), tail, strings.Repeat(" ", len(num)-2), pad.String())
}
