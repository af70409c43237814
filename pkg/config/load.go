package config

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Flag names defined by RegisterFlags.
const (
	FlagConfig      = "config"
	FlagAddressFile = "address-file"
	FlagListenGRPC  = "listen-grpc"
	FlagListenHTTP  = "listen-http"
	FlagListenAdmin = "listen-admin"
	FlagLogLevel    = "log-level"
	FlagLogFormat   = "log-format"
)

// MaxFileSize bounds the configuration file Load and Parse accept.
const MaxFileSize = 8 << 20

const envPrefix = "BULKHEAD"

// RegisterFlags defines the daemon's flags on fs: --config and
// --address-file, which the caller reads itself (see FlagConfig), and the
// five overrides Load applies when they are given.
func RegisterFlags(fs *pflag.FlagSet) {
	fs.String(FlagConfig, "", "path of the YAML configuration file (none: defaults, env and flags only)")
	fs.String(FlagAddressFile, "", `write {"grpc":ADDR,"http":ADDR,"admin":ADDR} to this path once the listeners are bound`)
	fs.String(FlagListenGRPC, "", "gRPC listen address, overrides listen.grpc (default "+DefaultListenGRPC+")")
	fs.String(FlagListenHTTP, "", "HTTP listen address, overrides listen.http (default "+DefaultListenHTTP+")")
	fs.String(FlagListenAdmin, "", "admin API listen address, overrides listen.admin (default "+DefaultListenAdmin+")")
	fs.String(FlagLogLevel, "", "log level: debug, info, warn or error; overrides log.level (default info)")
	fs.String(FlagLogFormat, "", "log format: text or json; overrides log.format (default text)")
}

// Load reads the configuration: defaults, then the YAML file at path (none
// if path is ""), then BULKHEAD_* environment variables, then the flags of
// flags (may be nil) that were set on the command line. It also reads the
// admin token from BULKHEAD_ADMIN_TOKEN, and checks that the admin token and
// TLS files the configuration names can be read and hold what they should.
// Errors are an *InvalidError (ErrInvalid), an ErrSyntax error, or the
// file's read error.
func Load(path string, flags *pflag.FlagSet) (*Config, error) {
	var data []byte
	if path != "" {
		var err error
		if data, err = readFile(path); err != nil {
			return nil, err
		}
	}
	return loadData(path, data, flags)
}

// loadData is Load with the file's content already read.
func loadData(path string, data []byte, flags *pflag.FlagSet) (*Config, error) {
	return build(path, data, true, flags)
}

// Parse decodes and validates a YAML configuration named name (used in error
// messages and as Config.Source) on top of the defaults. It ignores the
// environment and flags and reads no file, so its result depends on its
// arguments only: the admin token and TLS files are not checked.
func Parse(name string, data []byte) (*Config, error) {
	return build(name, data, false, nil)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // names the path
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, nil
}

// build is the one decode and validate path of Load and Parse.
func build(name string, data []byte, useEnv bool, flags *pflag.FlagSet) (*Config, error) {
	label := name
	if label == "" {
		label = "config"
	}
	if len(data) > MaxFileSize {
		ps := problems{}
		ps.add("", fmt.Sprintf("file is larger than %d bytes", MaxFileSize), "")
		return nil, ps.err(label)
	}
	root, err := parseYAML(label, data)
	if err != nil {
		return nil, err
	}

	d := &decoder{origin: map[string]string{}, explicit: map[string]bool{}, checkFiles: useEnv}
	fileSettings, rawBulkheads := d.splitRoot(root)

	v := layers(fileSettings, useEnv, flags)
	c := &Config{Source: name}
	for _, s := range scalars {
		raw := v.Get(s.key)
		d.origin[s.key] = originOf(s, raw, useEnv, flags)
		d.explicit[s.key] = d.origin[s.key] != "" || setIn(fileSettings, s.key)
		s.field.set(d, c, s.key, raw)
	}
	c.Bulkheads = d.bulkheads(rawBulkheads, c.Leases.DefaultTTL, c.Authz.DefaultPriority)
	if useEnv {
		d.envToken(c)
	}
	d.validate(c)
	if err := d.ps.err(label); err != nil {
		return nil, err
	}
	c.Warnings = (&problems{list: d.ws}).lines(label)
	return c, nil
}

// layers builds the private viper instance that layers each setting outside
// bulkheads: its default (SetDefault), the file's value (the settings the
// document's structure check kept), its env variable when useEnv (BindEnv),
// and its flag in flags (BindPFlag; viper reads a flag only once it was set
// on the command line). Viper resolves the precedence: flag, env, file,
// default.
func layers(fileSettings map[string]any, useEnv bool, flags *pflag.FlagSet) *viper.Viper {
	v := viper.New()
	// Cannot fail: MergeConfigMap only merges maps.
	_ = v.MergeConfigMap(fileSettings)
	v.AllowEmptyEnv(true) // BULKHEAD_AUTHZ_PRIORITY_HEADER= means ""
	for _, s := range scalars {
		v.SetDefault(s.key, s.def)
		// Each key is bound to its own variable rather than with
		// AutomaticEnv, which would let a stray BULKHEAD_LISTEN hide every
		// listen.* key.
		if useEnv {
			_ = v.BindEnv(s.key, envName(s.key)) // cannot fail: a name is given
		}
		if f := flagOf(flags, s); f != nil {
			_ = v.BindPFlag(s.key, f) // cannot fail: f is not nil
		}
	}
	return v
}

// flagOf returns the flag in flags bound to s, or nil if s has none.
func flagOf(flags *pflag.FlagSet, s scalar) *pflag.Flag {
	if flags == nil || s.flag == "" {
		return nil
	}
	return flags.Lookup(s.flag)
}

// originOf names where raw, the value viper returned for s, came from,
// for problems to show, when that was a flag ("--FLAG") or an env variable
// (its name); "" for the file or a default. It does not restate viper's
// precedence: it asks which of the two layers above the file holds raw (the
// flag once set on the command line, the variable once set, even to "";
// the flag when both do, as viper reads it first). TestOrigin checks it
// against every combination of layers.
func originOf(s scalar, raw any, useEnv bool, flags *pflag.FlagSet) string {
	// Flags and variables hold strings: comparing with raw of another
	// type (a YAML list or number) is false, never a panic.
	if f := flagOf(flags, s); f != nil && f.Changed && raw == any(f.Value.String()) {
		return "--" + f.Name
	}
	if e, set := os.LookupEnv(envName(s.key)); useEnv && set && raw == any(e) {
		return envName(s.key)
	}
	return ""
}
