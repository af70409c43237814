package envoy

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"text/template"
	"time"
)

//go:embed front-proxy.yaml.tmpl
var frontProxyTemplate string

// frontProxy is parsed once; parsing a constant template cannot fail at run
// time, so a failure is a broken invariant caught by every test.
var frontProxy = template.Must(template.New("front-proxy.yaml.tmpl").
	Funcs(template.FuncMap{
		"quote":      quote,
		"duration":   protoDuration,
		"discovery":  discoveryType,
		"goDuration": time.Duration.String,
	}).
	Option("missingkey=error").
	Parse(frontProxyTemplate))

// Render returns the Envoy v3 bootstrap YAML for p (after defaults). Invalid
// Params yield an error wrapping ErrInvalidParams that lists every problem.
func Render(p Params) ([]byte, error) {
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := frontProxy.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("render front-proxy template: %w", err)
	}
	return buf.Bytes(), nil
}

// quote returns s as a YAML double-quoted scalar (JSON strings are valid YAML).
func quote(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// protoDuration formats d as a protobuf JSON/YAML Duration, e.g. "1.5s".
func protoDuration(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

// discoveryType picks STATIC for an IP literal and STRICT_DNS for a name.
func discoveryType(host string) string {
	if net.ParseIP(host) != nil {
		return "STATIC"
	}
	return "STRICT_DNS"
}
