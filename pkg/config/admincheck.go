package config

import (
	"os"
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

// Field paths of the admin section.
const (
	keyTokenFile = "admin.token_file"
	keyAdminTLS  = "admin.tls"
	keyClientCA  = keyAdminTLS + ".client_ca_file"
)

// envToken sets c.Admin.Token from BULKHEAD_ADMIN_TOKEN. Problems name the
// variable and never show its value.
func (d *decoder) envToken(c *Config) {
	v, ok := os.LookupEnv(envAdminToken)
	if !ok {
		return
	}
	tok := strings.TrimSpace(v)
	switch reason := creds.TokenProblem(tok); reason {
	case "":
		c.Admin.Token = tok
	case "is empty":
		d.ps.add(envAdminToken, "is set but empty (unset it, or set it to the token)", "")
	default:
		d.ps.add(envAdminToken, reason, "")
	}
}

// admin checks the admin section and, against it, listen.admin; when
// d.checkFiles, it also reads the files the section names.
func (d *decoder) admin(c *Config) {
	d.tlsPairing(keyAdminTLS, c.Admin.TLS)
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		d.ps.add(keyTokenFile, "set either admin.token_file or "+envAdminToken+", not both",
			d.got(keyTokenFile, c.Admin.TokenFile))
	}
	if !c.Admin.Secured() && !d.anyBad("listen.admin", keyTokenFile, keyClientCA, envAdminToken) &&
		!creds.IsLoopback(c.Listen.Admin) {
		d.ps.add("listen.admin", "binding to a non-loopback address requires admin.token_file, "+
			envAdminToken+" or admin.tls.client_ca_file", d.got("listen.admin", c.Listen.Admin))
	}
	if d.checkFiles {
		d.adminFiles(c.Admin)
	}
}

// adminFiles checks that each file the admin section names can be read and
// holds what it should. Problems show the path, never a file's content.
func (d *decoder) adminFiles(a Admin) {
	if data := d.file(keyTokenFile, a.TokenFile, creds.MaxTokenSize); data != nil {
		if reason := creds.TokenProblem(strings.TrimSpace(string(data))); reason != "" {
			d.ps.add(keyTokenFile, "the token it holds "+reason, d.got(keyTokenFile, a.TokenFile))
		}
	}
	d.tlsContents(keyAdminTLS, a.TLS)
}
