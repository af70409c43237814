// Package config owns the daemon's typed configuration: its defaults, how it
// is loaded, and its validation.
//
// Load layers four sources, lowest first: built-in defaults, the YAML file,
// environment variables BULKHEAD_<PATH> (for example BULKHEAD_LISTEN_GRPC or
// BULKHEAD_AUTHZ_DENY_STATUS; every scalar outside bulkheads has one), and the
// command-line flags defined by RegisterFlags (only flags actually given on
// the command line count). Parse reads defaults and YAML only, for tests,
// fuzzing and reloads. Both decode and validate the same way.
//
// The layering goes through one private viper instance per call; the package
// uses no viper globals and has no package state. The bulkheads map is
// decoded straight from the YAML, not through viper, because viper folds key
// case and splits keys on dots, and bulkhead names are case-sensitive and may
// contain dots. Field names are strict everywhere: an unknown, misspelt or
// wrongly capitalised field is an error that names it.
//
// Validation reports every problem at once. Each is one line,
// "SOURCE: FIELD.PATH: reason (got VALUE)", and the error is an
// *InvalidError wrapping ErrInvalid. A YAML syntax error wraps ErrSyntax and
// names the source and, where YAML knows it, the line.
//
// A *Config returned by Load or Parse is immutable: it is safe to share
// between goroutines, and callers must not modify it (including its
// Bulkheads map). Load and Parse themselves are safe for concurrent use.
package config
