package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

var (
	// ErrInvalid is wrapped by every validation failure: an *InvalidError.
	ErrInvalid = errors.New("invalid configuration")
	// ErrSyntax is wrapped by errors for input that is not YAML at all.
	ErrSyntax = errors.New("YAML syntax error")
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Field is the dotted path of the field, e.g.
	// "bulkheads.catalog.max_concurrent" or "authz.deny_status", or the
	// environment variable BULKHEAD_ADMIN_TOKEN. In an *InvalidError, a path
	// holding an unprintable character (a key with a newline) is quoted.
	Field string
	// Reason says what is wrong, e.g. "must be at least 1".
	Reason string
	// Got is the offending value as written (strings quoted), and where it
	// came from when that was not the file; "" when there is none to show.
	Got string
}

// String formats the problem as "FIELD: reason (got VALUE)".
// A problem with the document as a whole has no field.
func (p Problem) String() string {
	s := p.Reason
	if p.Field != "" {
		s = p.Field + ": " + s
	}
	if p.Got != "" {
		s += " (got " + p.Got + ")"
	}
	return s
}

// InvalidError lists every problem found in one configuration. It wraps
// ErrInvalid; its message has one line per problem, each
// "SOURCE: FIELD.PATH: reason (got VALUE)".
type InvalidError struct {
	Source   string // the file or name the problems refer to
	Problems []Problem
}

func (e *InvalidError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Source)
		b.WriteString(": ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// problems collects Problems while a configuration is decoded and checked.
type problems struct {
	list []Problem
	// bad records fields already reported, so that later checks do not
	// pile a second, derived complaint on the same field.
	bad map[string]bool
}

func (ps *problems) add(field, reason, got string) {
	ps.list = append(ps.list, Problem{Field: field, Reason: reason, Got: got})
	if ps.bad == nil {
		ps.bad = make(map[string]bool)
	}
	ps.bad[field] = true
}

// lines returns the problems as an *InvalidError's lines ("SOURCE: FIELD:
// reason (got VALUE)"), ordered as err orders them; nil when there are none.
func (ps *problems) lines(source string) []string {
	err := ps.err(source)
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

// err returns nil or an *InvalidError listing the problems, ordered by field
// (stably, so problems of one field keep their order).
func (ps *problems) err(source string) error {
	if len(ps.list) == 0 {
		return nil
	}
	list := append([]Problem(nil), ps.list...)
	for i, p := range list {
		// A key holding a newline or another unprintable character would
		// break the one-line-per-problem format: quote it.
		if strings.ContainsFunc(p.Field, func(r rune) bool { return !unicode.IsPrint(r) }) {
			list[i].Field = strconv.Quote(p.Field)
		}
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Field < list[j].Field })
	return &InvalidError{Source: source, Problems: list}
}

// show formats a raw value for the "got" part of a problem.
func show(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("%q", v)
	case map[string]any, map[any]any:
		return "a mapping"
	case []any:
		return "a list"
	default:
		return fmt.Sprint(v)
	}
}
