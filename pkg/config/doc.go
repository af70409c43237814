// Package config owns the daemon's typed configuration: its defaults, how it
// is loaded, its validation, and watching its file for changes.
//
// Load layers four sources, lowest first: built-in defaults, the YAML file,
// environment variables BULKHEAD_<PATH> (for example BULKHEAD_LISTEN_GRPC,
// BULKHEAD_AUTHZ_DENY_STATUS or BULKHEAD_ADMIN_TLS_CERT_FILE; every scalar
// outside bulkheads has one), and the command-line flags defined by
// RegisterFlags (only flags actually given on the command line count). The
// admin bearer token is the one setting with no place in the file: it comes
// from admin.token_file (a path; the file holds the token) or from the
// variable BULKHEAD_ADMIN_TOKEN (the token itself), and it never appears in
// an error or when a Config is printed. Load also checks that the admin
// token and the TLS files (admin.tls, listen.grpc_tls; one set of checks for
// both) can be read and hold a token, certificates and a matching key,
// with the functions of package creds, which the listeners serve them with.
// Lists (authz.trusted_priority_sources) come from the environment as one
// comma-separated value. Parse reads defaults and YAML only, touching neither the
// environment nor the file system, for tests and fuzzing. Both decode and
// validate the same way otherwise.
//
// Every setting outside bulkheads is one row of a table (scalars.go): its
// key, default, flag, the Config field it fills, and whether it takes effect
// only at start (RestartOnly lists those a reload changed). Defaults of the
// Check policy and of the permit ledger are the constants of the packages
// that own them (authz, permit), and the authz section decodes straight
// into the Check policy's own authz.Settings, so this package translates
// nothing: a new Check setting is a field of authz.Settings, its default
// in authz, and its row in the table. The layering
// goes through one private viper instance per call (defaults, file, env,
// flags); the package uses no viper globals and has no package state. The bulkheads map is
// decoded straight from the YAML, not through viper, because viper folds key
// case and splits keys on dots, and bulkhead names are case-sensitive and may
// contain dots. Field names are strict everywhere: an unknown, misspelt or
// wrongly capitalised field is an error that names it.
//
// Validation reports every problem at once. Each is one line,
// "SOURCE: FIELD.PATH: reason (got VALUE)", and the error is an
// *InvalidError wrapping ErrInvalid. A YAML syntax error wraps ErrSyntax and
// reads "SOURCE:LINE:COL: YAML syntax error: reason" followed by the line,
// quoted, with a caret under the column. yaml.v3 decides what is YAML;
// github.com/goccy/go-yaml, which keeps every token's position, says where
// the problem is (yaml.v3 often names the line its enclosing block began
// on); when it cannot, the error is "SOURCE: YAML syntax error: " and
// yaml.v3's message (syntax.go). Among the rules: the
// admin listener must be a loopback address (creds.IsLoopback) unless a
// token or mTLS is configured, so that the daemon refuses to start exposed.
//
// Watch follows the file (in-place writes, rename-over writes and the
// Kubernetes ConfigMap symlink swap) and hands each changed version, loaded
// as Load would, to a callback; it runs on its caller's goroutine and stops,
// leaving nothing behind, when its context ends.
//
// A *Config returned by Load or Parse is immutable: it is safe to share
// between goroutines, and callers must not modify it (including its
// Bulkheads map and Tenant templates). Load, Parse and Watch are safe for
// concurrent use.
package config
