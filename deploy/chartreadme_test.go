package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	chartReadmePath = "charts/bulkhead/README.md"
	chartValuesPath = "charts/bulkhead/values.yaml"
	valuesStart     = "<!-- values table: generated from values.yaml by `make chart-readme`; do not edit -->"
	valuesEnd       = "<!-- end of values table -->"
)

// The chart README's values table is generated from values.yaml and its
// comments; a stale table fails with the difference. `make chart-readme`
// (this test with -update) rewrites it.
func TestChartReadmeValuesTable(t *testing.T) {
	table, err := valuesTable(readRepoFile(t, chartValuesPath))
	if err != nil {
		t.Fatalf("%s: %v", chartValuesPath, err)
	}
	readme := string(readRepoFile(t, chartReadmePath))
	before, rest, ok1 := strings.Cut(readme, valuesStart+"\n")
	current, after, ok2 := strings.Cut(rest, valuesEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s: no values table between the lines\n%s\n%s", chartReadmePath, valuesStart, valuesEnd)
	}
	if current == table {
		return
	}
	if *update {
		out := before + valuesStart + "\n" + table + valuesEnd + after
		if err := os.WriteFile(filepath.Join(repoRoot(t), chartReadmePath), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the values table is stale against %s; run `make chart-readme`.\n--- README\n+++ values.yaml\n%s",
		chartReadmePath, chartValuesPath, lineDiff(current, table))
}

// A value's description is its comment: the lines above the key (prose
// only: indented example lines are left in values.yaml) and the one after
// it. A pipe in a comment does not break the table.
func TestValuesTableRows(t *testing.T) {
	in := `# the document's own comment, not a value's

a:
  # Off or on.
  # Example:
  #   a: {b: true}
  b: false   # x | y, <name>.*_file
  c: {d: 1}
  g: "1"
  e: []
f: ""
`
	got, err := valuesTable([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := "| key | default | description |\n|---|---|---|\n" +
		"| `a.b` | `false` | Off or on. Example: (see values.yaml) x \\| y, &lt;name&gt;.\\*_file |\n" +
		"| `a.c` | `{\"d\":1}` |  |\n" +
		"| `a.g` | `\"1\"` |  |\n" +
		"| `a.e` | `[]` |  |\n" +
		"| `f` | `\"\"` |  |\n"
	if got != want {
		t.Errorf("valuesTable:\n%s\nwant\n%s", got, want)
	}
}

// valuesTable renders the markdown table of values.yaml's leaves: a
// scalar, a list, or an empty or flow-style mapping. A block mapping is a
// section: its comment heads the rows of its keys.
func valuesTable(values []byte) (string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return "", err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return "", fmt.Errorf("want a mapping at the top")
	}
	var b strings.Builder
	b.WriteString("| key | default | description |\n|---|---|---|\n")
	if err := valuesRows(&b, "", doc.Content[0]); err != nil {
		return "", err
	}
	return b.String(), nil
}

func valuesRows(b *strings.Builder, prefix string, m *yaml.Node) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		path := prefix + k.Value
		desc := describe(k.HeadComment, k.LineComment+" "+v.LineComment)
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 && v.Style&yaml.FlowStyle == 0 {
			if desc != "" {
				fmt.Fprintf(b, "| `%s` |  | %s |\n", path, desc)
			}
			if err := valuesRows(b, path+".", v); err != nil {
				return err
			}
			continue
		}
		var val any
		if err := v.Decode(&val); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		// As written: no HTML escapes (a CEL default's && stays &&).
		var enc bytes.Buffer
		e := json.NewEncoder(&enc)
		e.SetEscapeHTML(false)
		if err := e.Encode(val); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		def := bytes.TrimSuffix(enc.Bytes(), []byte("\n"))
		if v.Kind == yaml.ScalarNode && v.Tag == "!!str" && v.Value != "" && v.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
			def = []byte(v.Value) // a plain string as written; a quoted one ("1") keeps its quotes
		}
		fmt.Fprintf(b, "| `%s` | `%s` | %s |\n", path, def, desc)
	}
	return nil
}

// describe joins a key's comment lines into one table cell: the prose
// lines, and a pointer to values.yaml in place of indented example lines.
func describe(head, line string) string {
	var words []string
	example := false
	for _, l := range strings.Split(head, "\n") {
		l = strings.TrimPrefix(strings.TrimPrefix(l, "#"), " ")
		switch {
		case strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, " "):
			example = true
		default:
			if example {
				words = append(words, "(see values.yaml)")
				example = false
			}
			words = append(words, strings.TrimSpace(l))
		}
	}
	if example {
		words = append(words, "(see values.yaml)")
	}
	if l := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#")); l != "" {
		words = append(words, l)
	}
	return cellEscaper.Replace(strings.Join(words, " "))
}

// cellEscaper keeps a comment's text as written in a markdown table cell:
// a pipe would end the cell, <fullname> would be read as HTML, and a star
// (*_file) would start emphasis.
var cellEscaper = strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "*", `\*`)

// lineDiff is a unified-style diff of two texts' lines (longest common
// subsequence; the texts are a few hundred lines).
func lineDiff(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	lcs := make([][]int, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out bytes.Buffer
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			fmt.Fprintf(&out, "-%s\n", x[i])
			i++
		default:
			fmt.Fprintf(&out, "+%s\n", y[j])
			j++
		}
	}
	return out.String()
}
