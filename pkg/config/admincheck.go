package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
)

// Field paths of the admin section.
const (
	keyTokenFile = "admin.token_file"
	keyCertFile  = "admin.tls.cert_file"
	keyKeyFile   = "admin.tls.key_file"
	keyClientCA  = "admin.tls.client_ca_file"
)

// maxPEMSize bounds the TLS files Load reads.
const maxPEMSize = 1 << 20

// envToken sets c.Admin.Token from BULKHEAD_ADMIN_TOKEN. Problems name the
// variable and never show its value.
func (d *decoder) envToken(c *Config) {
	v, ok := os.LookupEnv(envAdminToken)
	if !ok {
		return
	}
	tok := strings.TrimSpace(v)
	switch reason := tokenProblem(tok); reason {
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
	t := c.Admin.TLS
	isSet := func(key, v string) bool { return v != "" || d.ps.bad[key] }
	cert, key, ca := isSet(keyCertFile, t.CertFile), isSet(keyKeyFile, t.KeyFile), isSet(keyClientCA, t.ClientCAFile)
	switch {
	case cert && !key:
		d.ps.add(keyKeyFile, "is required when admin.tls.cert_file is set", "")
	case key && !cert:
		d.ps.add(keyCertFile, "is required when admin.tls.key_file is set", "")
	case ca && !cert && !key && !d.ps.bad[keyClientCA]:
		d.ps.add(keyClientCA, "requires admin.tls.cert_file and admin.tls.key_file (mTLS needs a server certificate)",
			d.got(keyClientCA, t.ClientCAFile))
	}
	if c.Admin.Token != "" && c.Admin.TokenFile != "" {
		d.ps.add(keyTokenFile, "set either admin.token_file or "+envAdminToken+", not both",
			d.got(keyTokenFile, c.Admin.TokenFile))
	}
	if !c.Admin.Secured() && !d.anyBad("listen.admin", keyTokenFile, keyClientCA, envAdminToken) &&
		!isLoopback(c.Listen.Admin) {
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
	if data := d.file(keyTokenFile, a.TokenFile, MaxTokenSize); data != nil {
		if reason := tokenProblem(strings.TrimSpace(string(data))); reason != "" {
			d.ps.add(keyTokenFile, "the token it holds "+reason, d.got(keyTokenFile, a.TokenFile))
		}
	}
	certPEM := d.file(keyCertFile, a.TLS.CertFile, maxPEMSize)
	keyPEM := d.file(keyKeyFile, a.TLS.KeyFile, maxPEMSize)
	switch {
	case certPEM != nil && !hasCertificate(certPEM):
		d.ps.add(keyCertFile, "holds no PEM certificate", d.got(keyCertFile, a.TLS.CertFile))
	case certPEM != nil && keyPEM != nil:
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			d.ps.add(keyKeyFile, "is not the private key of admin.tls.cert_file: "+
				strings.TrimPrefix(err.Error(), "tls: "), d.got(keyKeyFile, a.TLS.KeyFile))
		}
	}
	if caPEM := d.file(keyClientCA, a.TLS.ClientCAFile, maxPEMSize); caPEM != nil && !hasCertificate(caPEM) {
		d.ps.add(keyClientCA, "holds no PEM certificate", d.got(keyClientCA, a.TLS.ClientCAFile))
	}
}

// file reads the file at path for the setting key, recording a problem if
// it cannot. It returns nil when path is "", the key was already reported,
// or the file cannot be read.
func (d *decoder) file(key, path string, limit int64) []byte {
	if path == "" || d.ps.bad[key] {
		return nil
	}
	data, err := readSmall(path, limit)
	if err != nil {
		d.ps.add(key, fileReason(err, limit), d.got(key, path))
		return nil
	}
	return data
}

// fileReason turns readSmall's error into a problem reason without the path.
func fileReason(err error, limit int64) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "file does not exist"
	case errors.Is(err, fs.ErrPermission):
		return "file cannot be read: permission denied"
	case errors.Is(err, errNotRegular):
		return "must be a regular file"
	case errors.Is(err, errTooLarge):
		return fmt.Sprintf("file is larger than %d bytes", limit)
	case errors.As(err, &pe):
		return "file cannot be read: " + pe.Err.Error()
	}
	return "file cannot be read: " + err.Error()
}

// hasCertificate reports whether data holds at least one PEM block of type
// CERTIFICATE that parses as an X.509 certificate.
func hasCertificate(data []byte) bool {
	// Each iteration consumes a block, so the input's length bounds the loop.
	for range len(data) {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(block.Bytes); err == nil {
				return true
			}
		}
	}
	return false
}

// isLoopback reports whether the listen address addr binds only to the
// loopback interface: "localhost" or a loopback IP. An empty host (all
// interfaces), another name or an unparsable address is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
