package config

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
)

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
// certificate. The checks are creds's, which the listeners serve the files
// with. Problems show the path, never a file's content.
func (d *decoder) tlsContents(prefix string, t TLSFiles) {
	d.pemFiles(prefix+".cert_file", t.CertFile, prefix+".key_file", t.KeyFile, prefix+".client_ca_file", t.ClientCAFile)
}

// pemFiles checks a certificate and its key and a CA bundle (each path may
// be ""), named by their settings' keys, with creds's checks.
func (d *decoder) pemFiles(certKey, cert, keyKey, key, caKey, ca string) {
	certPEM := d.file(certKey, cert, creds.MaxPEMSize)
	keyPEM := d.file(keyKey, key, creds.MaxPEMSize)
	if certPEM != nil {
		_, err := creds.KeyPair(certPEM, keyPEM)
		switch {
		case errors.Is(err, creds.ErrNoCertificate):
			d.ps.add(certKey, "holds no PEM certificate", d.got(certKey, cert))
		case errors.Is(err, creds.ErrKeyPair) && keyPEM != nil:
			d.ps.add(keyKey, "is not the private key of "+certKey+": "+
				strings.TrimPrefix(err.Error(), creds.ErrKeyPair.Error()+": "), d.got(keyKey, key))
		}
	}
	if caPEM := d.file(caKey, ca, creds.MaxPEMSize); caPEM != nil {
		if _, err := creds.CertPool(caPEM); err != nil {
			d.ps.add(caKey, "holds no PEM certificate", d.got(caKey, ca))
		}
	}
}

// file reads the file at path for the setting key, recording a problem if
// it cannot. It returns nil when path is "", the key was already reported,
// or the file cannot be read.
func (d *decoder) file(key, path string, limit int64) []byte {
	if path == "" || d.ps.bad[key] {
		return nil
	}
	data, err := creds.ReadFile(path, limit)
	if err != nil {
		d.ps.add(key, fileReason(err, limit), d.got(key, path))
		return nil
	}
	return data
}

// fileReason turns creds.ReadFile's error into a problem reason without the path.
func fileReason(err error, limit int64) string {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "file does not exist"
	case errors.Is(err, fs.ErrPermission):
		return "file cannot be read: permission denied"
	case errors.Is(err, creds.ErrNotRegular):
		return "must be a regular file"
	case errors.Is(err, creds.ErrTooLarge):
		return fmt.Sprintf("file is larger than %d bytes", limit)
	case errors.As(err, &pe):
		return "file cannot be read: " + pe.Err.Error()
	}
	return "file cannot be read: " + err.Error()
}
