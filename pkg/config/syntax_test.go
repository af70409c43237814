package config

import (
	"errors"
	"strings"
	"testing"
)

// Each malformed file is reported at the line and column of its problem,
// with that line quoted and a caret under the column.
func TestParseSyntaxError(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, want string }{
		{"key indented too far, line 4",
			"listen:\n  grpc: a\n  http: b\n   admin: c\nlog: {}\n",
			"config.yaml:4:9: YAML syntax error: mapping value is not allowed in this context\n" +
				"    4 |    admin: c\n" +
				"      |         ^"},
		{"key indented too little, line 6",
			"listen:\n  grpc: a\nbulkheads:\n  catalog:\n    max_concurrent: 1\n   max_queue: 2\n",
			"config.yaml:6:4: YAML syntax error: value is not allowed in this context\n" +
				"    6 |    max_queue: 2\n" +
				"      |    ^"},
		{"bad indentation at the top level",
			"listen:\n  grpc: a\n http: b\n",
			"config.yaml:3:2: YAML syntax error: value is not allowed in this context\n" +
				"    3 |  http: b\n" +
				"      |  ^"},
		{"flow mapping opened on line 2 and not closed",
			"log: {level: info}\nbulkheads: {catalog: {max_concurrent: 1}\nauthz: {}\n",
			"config.yaml:2:12: YAML syntax error: \"{\" is never closed (at line 3, column 1: ',' or '}' must be specified)\n" +
				"    2 | bulkheads: {catalog: {max_concurrent: 1}\n" +
				"      |            ^"},
		{"flow mapping not closed at the end",
			"log: {level: info}\nbulkheads: {catalog: {max_concurrent: 1}, auth: {max_concurrent: 2}\n",
			"config.yaml:2:12: YAML syntax error: could not find flow mapping end token '}'\n" +
				"    2 | bulkheads: {catalog: {max_concurrent: 1}, auth: {max_concurrent: 2}\n" +
				"      |            ^"},
		{"flow sequence not closed",
			"listen:\n  grpc: [a\nlog: {}\n",
			"config.yaml:2:9: YAML syntax error: \"[\" is never closed (at line 3, column 1: ',' or ']' must be specified)\n" +
				"    2 |   grpc: [a\n" +
				"      |         ^"},
		{"junk inside a flow mapping",
			"log: {level: 'warn' x}\n",
			"config.yaml:1:21: YAML syntax error: ',' or '}' must be specified\n" +
				"    1 | log: {level: 'warn' x}\n" +
				"      |                     ^"},
		{"tab indentation",
			"log: {}\nlisten:\n\tgrpc: a\n",
			"config.yaml:3:1: YAML syntax error: found character '\t' that cannot start any token\n" +
				"    3 | \tgrpc: a\n" +
				"      | ^"},
		{"duplicate key",
			"bulkheads:\n  c: {max_concurrent: 1}\n  c: {max_concurrent: 2}\n",
			"config.yaml:3:3: YAML syntax error: mapping key \"c\" already defined at line 2, column 3\n" +
				"    3 |   c: {max_concurrent: 2}\n" +
				"      |   ^"},
		{"unterminated quoted scalar",
			"log:\n  level: \"info\n",
			"config.yaml:2:10: YAML syntax error: could not find end character of double-quoted text\n" +
				"    2 |   level: \"info\n" +
				"      |          ^"},
		{"reserved character starts a scalar",
			"listen: {grpc: a}\nlog: @warn\n",
			"config.yaml:2:6: YAML syntax error: '@' is a reserved character\n" +
				"    2 | log: @warn\n" +
				"      |      ^"},
		{"mapping value inside a scalar",
			"authz:\n  deny_status: 503: 429\n",
			"config.yaml:2:19: YAML syntax error: mapping value is not allowed in this context\n" +
				"    2 |   deny_status: 503: 429\n" +
				"      |                   ^"},
		{"caret keeps the tabs before it",
			"authz: {deny_status: 503}\nlog: \t\"warn\" x\n",
			"config.yaml:2:14: YAML syntax error: value is not allowed in this context. map key-value is pre-defined\n" +
				"    2 | log: \t\"warn\" x\n" +
				"      |      \t       ^"},
		{"columns count characters, not bytes",
			"log:\n  level: \"é\" x\n",
			"config.yaml:2:14: YAML syntax error: value is not allowed in this context. map key-value is pre-defined\n" +
				"    2 |   level: \"é\" x\n" +
				"      |              ^"},
		// Where the second parser accepts what yaml.v3 refuses, yaml.v3's
		// message stands.
		{"unknown anchor", "log: *nope\n", "config.yaml: YAML syntax error: unknown anchor 'nope' referenced"},
		{"tab after spaces", "listen:\n  \tgrpc: a\n", "config.yaml: YAML syntax error: line 2: found character that cannot start any token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("config.yaml", []byte(tt.yaml))
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error = %v, want ErrSyntax", err)
			}
			if err.Error() != tt.want {
				t.Errorf("error =\n%s\nwant\n%s", err, tt.want)
			}
		})
	}
}

// Load names the file as the daemon was given it.
func TestLoadSyntaxErrorNamesFile(t *testing.T) {
	path := writeFile(t, "listen:\n  grpc: a\n  http: b\n   admin: c\n")
	_, err := Load(path, nil)
	if want := path + ":4:9: YAML syntax error: "; !errors.Is(err, ErrSyntax) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want prefix %q", err, want)
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	data := []byte("a: 1\r\nbé: x\n")
	if got, want := quote(data, 2, 4), "    2 | bé: x\n      |    ^"; got != want {
		t.Errorf("quote = %q, want %q", got, want)
	}
	if got := quote(data, 9, 1); got != "" {
		t.Errorf("quote past the end = %q, want \"\"", got)
	}

	// A long line is cut to a window around the column.
	long := []byte("k: " + strings.Repeat("a", 300) + "X" + strings.Repeat("b", 300) + "\n")
	got := quote(long, 1, 304)
	want := "    1 | …" + strings.Repeat("a", 60) + "X" + strings.Repeat("b", 59) + "…\n" +
		"      |  " + strings.Repeat(" ", 60) + "^"
	if got != want {
		t.Errorf("quote of a long line =\n%s\nwant\n%s", got, want)
	}
	got = quote(long, 1, 2)
	want = "    1 | k: " + strings.Repeat("a", 117) + "…\n      |  ^"
	if got != want {
		t.Errorf("quote of a long line's start =\n%s\nwant\n%s", got, want)
	}
	got = quote(long, 1, 605)
	want = "    1 | …" + strings.Repeat("b", 120) + "\n      |  " + strings.Repeat(" ", 120) + "^"
	if got != want {
		t.Errorf("quote past a long line's end =\n%s\nwant\n%s", got, want)
	}
}
