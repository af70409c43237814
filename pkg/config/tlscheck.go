package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// MaxPEMSize bounds each TLS file (certificate, key, CA bundle) that Load
// reads, and that servers should accept when they re-read one.
const MaxPEMSize = 1 << 20

// tlsPairing checks which files of the TLS section at prefix (e.g.
// "admin.tls") are set: cert_file and key_file together, client_ca_file
// only with both.
func (d *decoder) tlsPairing(prefix string, t TLSFiles) {
	certKey, keyKey, caKey := prefix+".cert_file", prefix+".key_file", prefix+".client_ca_file"
	isSet := func(key, v string) bool { return v != "" || d.ps.bad[key] }
	cert, key, ca := isSet(certKey, t.CertFile), isSet(keyKey, t.KeyFile), isSet(caKey, t.ClientCAFile)
	switch {
	case cert && !key:
		d.ps.add(keyKey, "is required when "+certKey+" is set", "")
	case key && !cert:
		d.ps.add(certKey, "is required when "+keyKey+" is set", "")
	case ca && !cert && !key && !d.ps.bad[caKey]:
		d.ps.add(caKey, "requires "+certKey+" and "+keyKey+" (mTLS needs a server certificate)",
			d.got(caKey, t.ClientCAFile))
	}
}

// tlsContents checks that each file of the TLS section at prefix can be
// read and holds what it should: a certificate, its private key, a CA
// certificate. Problems show the path, never a file's content.
func (d *decoder) tlsContents(prefix string, t TLSFiles) {
	certKey, keyKey, caKey := prefix+".cert_file", prefix+".key_file", prefix+".client_ca_file"
	certPEM := d.file(certKey, t.CertFile, MaxPEMSize)
	keyPEM := d.file(keyKey, t.KeyFile, MaxPEMSize)
	switch {
	case certPEM != nil && !hasCertificate(certPEM):
		d.ps.add(certKey, "holds no PEM certificate", d.got(certKey, t.CertFile))
	case certPEM != nil && keyPEM != nil:
		if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			d.ps.add(keyKey, "is not the private key of "+certKey+": "+
				strings.TrimPrefix(err.Error(), "tls: "), d.got(keyKey, t.KeyFile))
		}
	}
	if caPEM := d.file(caKey, t.ClientCAFile, MaxPEMSize); caPEM != nil && !hasCertificate(caPEM) {
		d.ps.add(caKey, "holds no PEM certificate", d.got(caKey, t.ClientCAFile))
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

// ErrNoCertificate is wrapped by TLSFiles.Parse's error for a client CA
// file that holds no PEM certificate.
var ErrNoCertificate = errors.New("no PEM certificate")

// TLSPEM is the content of the files a TLSFiles names.
type TLSPEM struct {
	Cert, Key []byte
	ClientCA  []byte // nil when ClientCAFile is ""
}

// Equal reports whether p and q hold the same bytes.
func (p TLSPEM) Equal(q TLSPEM) bool {
	return bytes.Equal(p.Cert, q.Cert) && bytes.Equal(p.Key, q.Key) && bytes.Equal(p.ClientCA, q.ClientCA)
}

// ReadPEM reads t's files now, each bounded by MaxPEMSize. Servers call it
// again to follow rotation (Parse turns the result into what tls needs).
// Errors name the file, never its content.
func (t TLSFiles) ReadPEM() (TLSPEM, error) {
	var p TLSPEM
	var err error
	if p.Cert, err = readSmall(t.CertFile, MaxPEMSize); err != nil {
		return TLSPEM{}, err
	}
	if p.Key, err = readSmall(t.KeyFile, MaxPEMSize); err != nil {
		return TLSPEM{}, err
	}
	if t.ClientCAFile != "" {
		if p.ClientCA, err = readSmall(t.ClientCAFile, MaxPEMSize); err != nil {
			return TLSPEM{}, err
		}
	}
	return p, nil
}

// Parse turns p, read from t's files, into the server key pair (its Leaf
// set) and the pool of client CAs (nil when p has none). Errors name t's
// files, never their content.
func (t TLSFiles) Parse(p TLSPEM) (tls.Certificate, *x509.CertPool, error) {
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%s, %s: %w", t.CertFile, t.KeyFile, err)
	}
	if pair.Leaf == nil { // GODEBUG=x509keypairleaf=0
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("%s: %w", t.CertFile, err)
		}
	}
	if p.ClientCA == nil {
		return pair, nil, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.ClientCA) {
		return tls.Certificate{}, nil, fmt.Errorf("%s: %w", t.ClientCAFile, ErrNoCertificate)
	}
	return pair, pool, nil
}
