package testbed

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors of the metrics reader.
var (
	ErrMetricsFormat = errors.New("malformed metrics exposition")
	ErrScrape        = errors.New("scrape")
)

// Sample is one line of a Prometheus text exposition. Histogram and summary
// series appear under their own names (x_bucket, x_sum, x_count).
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is a parsed exposition. It is immutable and safe for concurrent use.
type Metrics struct {
	byName map[string][]Sample
}

// Scrape GETs url (a /metrics endpoint) and parses the text exposition.
// It opens one connection and closes it.
func Scrape(ctx context.Context, url string) (*Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrScrape, url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	client := &http.Client{
		Transport: &http.Transport{DisableKeepAlives: true},
		Timeout:   10 * time.Second,
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrScrape, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w %s: status %d", ErrScrape, url, resp.StatusCode)
	}
	m, err := ParseMetrics(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrScrape, url, err)
	}
	return m, nil
}

// ParseMetrics reads the Prometheus text format (version 0.0.4, including
// quoted UTF-8 names). Comments and blank lines are skipped; timestamps are
// ignored.
func ParseMetrics(r io.Reader) (*Metrics, error) {
	m := &Metrics{byName: map[string][]Sample{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		s, err := parseSample(text)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrMetricsFormat, line, err)
		}
		m.byName[s.Name] = append(m.byName[s.Name], s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMetricsFormat, err)
	}
	return m, nil
}

// Samples returns the samples named name (shared; do not modify).
func (m *Metrics) Samples(name string) []Sample { return m.byName[name] }

// Value returns the value of the series name whose label set is exactly
// labels (nil or empty for a series without labels).
func (m *Metrics) Value(name string, labels map[string]string) (float64, bool) {
	for _, s := range m.byName[name] {
		if maps.Equal(s.Labels, labels) {
			return s.Value, true
		}
	}
	return 0, false
}

// Sum adds up every series name whose labels include subset (nil = all).
func (m *Metrics) Sum(name string, subset map[string]string) float64 {
	total := 0.0
	for _, s := range m.byName[name] {
		if hasLabels(s.Labels, subset) {
			total += s.Value
		}
	}
	return total
}

func hasLabels(labels, subset map[string]string) bool {
	for k, v := range subset {
		got, ok := labels[k]
		if !ok || got != v {
			return false
		}
	}
	return true
}

// parseSample parses `name{l="v",...} value [timestamp]`. The name may also
// be written as the first, quoted, item inside the braces.
func parseSample(text string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := 0
	for i < len(text) && text[i] != '{' && text[i] != ' ' && text[i] != '\t' {
		i++
	}
	s.Name = text[:i]
	rest := text[i:]
	if strings.HasPrefix(rest, "{") {
		var err error
		rest, err = parseLabels(rest[1:], &s)
		if err != nil {
			return s, err
		}
	}
	if s.Name == "" {
		return s, errors.New("sample without a metric name")
	}
	fields := strings.Fields(rest)
	if len(fields) < 1 || len(fields) > 2 {
		return s, fmt.Errorf("%s: want a value and an optional timestamp, got %q", s.Name, rest)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("%s: value: %w", s.Name, err)
	}
	s.Value = v
	return s, nil
}

// parseLabels reads label pairs up to the closing brace and returns what
// follows it.
func parseLabels(rest string, s *Sample) (string, error) {
	for {
		rest = strings.TrimLeft(rest, " \t,")
		if rest == "" {
			return "", errors.New("unterminated label set")
		}
		if rest[0] == '}' {
			return rest[1:], nil
		}
		var key string
		if rest[0] == '"' {
			k, after, err := unquote(rest)
			if err != nil {
				return "", err
			}
			key, rest = k, strings.TrimLeft(after, " \t")
			if rest == "" || rest[0] != '=' { // a quoted metric name
				if s.Name != "" {
					return "", fmt.Errorf("second metric name %q", key)
				}
				s.Name = key
				continue
			}
		} else {
			j := strings.IndexAny(rest, "= \t")
			if j <= 0 {
				return "", fmt.Errorf("bad label name in %q", rest)
			}
			key, rest = rest[:j], strings.TrimLeft(rest[j:], " \t")
		}
		if rest == "" || rest[0] != '=' {
			return "", fmt.Errorf("label %s: missing '='", key)
		}
		rest = strings.TrimLeft(rest[1:], " \t")
		val, after, err := unquote(rest)
		if err != nil {
			return "", fmt.Errorf("label %s: %w", key, err)
		}
		s.Labels[key] = val
		rest = after
	}
}

// unquote reads a double-quoted string with the escapes \\, \" and \n from
// the start of text and returns it and what follows.
func unquote(text string) (string, string, error) {
	if text == "" || text[0] != '"' {
		return "", "", fmt.Errorf("want a quoted string at %q", text)
	}
	var b strings.Builder
	for i := 1; i < len(text); i++ {
		switch c := text[i]; c {
		case '"':
			return b.String(), text[i+1:], nil
		case '\\':
			if i+1 >= len(text) {
				return "", "", errors.New("dangling escape")
			}
			i++
			switch text[i] {
			case 'n':
				b.WriteByte('\n')
			case '\\', '"':
				b.WriteByte(text[i])
			default:
				b.WriteByte('\\')
				b.WriteByte(text[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated quoted string")
}
