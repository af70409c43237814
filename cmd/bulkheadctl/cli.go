package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/bulkhead-mesh/bulkhead/pkg/creds"
	"github.com/bulkhead-mesh/bulkhead/pkg/version"
)

// Exit codes scripts can rely on.
const (
	exitOK      = 0
	exitRefused = 1 // the server refused: invalid, not found, ...
	exitUsage   = 2 // bad command line
	exitConnect = 3 // cannot connect, or not authenticated
)

const exitCodesHelp = `Exit codes:
  0  success
  1  the server refused the request (invalid value, unknown bulkhead, ...)
  2  usage error (unknown command or flag, missing argument)
  3  cannot connect to the admin API, or not authenticated`

const defaultAddr = "127.0.0.1:9091"

// exitError carries a message for the user and the exit code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &exitError{exitUsage, fmt.Sprintf(format, args...)}
}

// globals are the flags every command takes.
type globals struct {
	addr, token, tokenFile    string
	tls                       bool
	caFile, certFile, keyFile string
	timeout                   time.Duration
}

func (g *globals) register(fs *pflag.FlagSet, getenv func(string) string) {
	addr := defaultAddr
	if v := getenv("BULKHEADCTL_ADDR"); v != "" {
		addr = v
	}
	fs.StringVar(&g.addr, "addr", addr, "admin API address, `host:port` (env BULKHEADCTL_ADDR)")
	fs.StringVar(&g.token, "token", "", "bearer token (env BULKHEADCTL_TOKEN)")
	fs.StringVar(&g.tokenFile, "token-file", "", "read the bearer token from this `file`")
	fs.BoolVar(&g.tls, "tls", false, "connect with TLS (implied by --ca-file, --cert-file, --key-file)")
	fs.StringVar(&g.caFile, "ca-file", "", "CA certificates (PEM `file`) to verify the server with (default: the system's)")
	fs.StringVar(&g.certFile, "cert-file", "", "client certificate (PEM `file`) for mTLS")
	fs.StringVar(&g.keyFile, "key-file", "", "client key (PEM `file`) for mTLS")
	fs.DurationVar(&g.timeout, "timeout", 5*time.Second, "bound on each call to the admin API")
}

// app is one invocation of bulkheadctl.
type app struct {
	g      globals
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	tty    bool
	conn   *grpc.ClientConn
}

// command is one subcommand. setup registers its flags and returns the
// function that runs it with the positional arguments.
type command struct {
	name, usage, summary, help string
	setup                      func(fs *pflag.FlagSet) func(ctx context.Context, a *app, args []string) error
}

func commands() []*command {
	return []*command{statusCmd(), getCmd(), holdersCmd(), setCmd(), resetCmd(), circuitCmd(), suggestCmd(), watchCmd()}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer, tty bool) int {
	a := &app{getenv: getenv, stdout: stdout, stderr: stderr, tty: tty}
	err := a.run(ctx, args)
	if a.conn != nil {
		a.conn.Close()
	}
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		fmt.Fprintf(stderr, "bulkheadctl: %s\n", ee.msg)
		if ee.code == exitUsage {
			fmt.Fprintln(stderr, "Run 'bulkheadctl help' for usage.")
		}
		return ee.code
	default:
		fmt.Fprintf(stderr, "bulkheadctl: %v\n", err)
		return exitRefused
	}
}

func (a *app) run(ctx context.Context, args []string) error {
	global := pflag.NewFlagSet("bulkheadctl", pflag.ContinueOnError)
	global.SetOutput(io.Discard)
	global.SetInterspersed(false) // stop at the command name
	global.SortFlags = false
	a.g.register(global, a.getenv)
	help := global.BoolP("help", "h", false, "show help")
	showVersion := global.Bool("version", false, "print the version and exit")
	if err := global.Parse(args); err != nil {
		return usagef("%v", err)
	}
	rest := global.Args()
	if *showVersion && !*help {
		fmt.Fprintln(a.stdout, version.String("bulkheadctl"))
		return nil
	}
	if *help || len(rest) == 0 {
		a.mainHelp(global)
		if len(rest) == 0 && !*help {
			return usagef("no command given")
		}
		return nil
	}
	name := rest[0]
	if name == "help" {
		return a.helpCmd(global, rest[1:])
	}
	c := findCommand(name)
	if c == nil {
		return usagef("unknown command %q (commands: %s)", name, commandNames())
	}
	fs := c.flagSet(global)
	runner := c.setup(fs)
	if err := fs.Parse(rest[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			a.commandHelp(c, fs)
			return nil
		}
		return usagef("%s: %v", c.name, err)
	}
	if h, _ := fs.GetBool("help"); h {
		a.commandHelp(c, fs)
		return nil
	}
	if err := a.loadToken(); err != nil {
		return err
	}
	return runner(ctx, a, fs.Args())
}

// flagSet returns the command's flag set, holding the global flags too so
// that they may follow the command name.
func (c *command) flagSet(global *pflag.FlagSet) *pflag.FlagSet {
	fs := pflag.NewFlagSet("bulkheadctl "+c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	fs.AddFlagSet(global)
	return fs
}

func (a *app) loadToken() error {
	if a.g.token == "" && a.g.tokenFile != "" {
		tok, err := creds.ReadToken(a.g.tokenFile)
		if err != nil {
			return usagef("--token-file: %v", err)
		}
		a.g.token = tok
	}
	if a.g.token == "" {
		a.g.token = strings.TrimSpace(a.getenv("BULKHEADCTL_TOKEN"))
	}
	return nil
}

func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

func (a *app) mainHelp(global *pflag.FlagSet) {
	w := a.stdout
	fmt.Fprint(w, `bulkheadctl shows and changes the bulkheads of a running Bulkhead through
its admin API (listen.admin, default 127.0.0.1:9091).

Usage:
  bulkheadctl [global flags] COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "help about a command: bulkheadctl help COMMAND")
	fmt.Fprintf(w, "\nGlobal flags (also accepted after the command):\n%s\n\n%s\n", globalUsages(global), exitCodesHelp)
}

func globalUsages(global *pflag.FlagSet) string {
	return strings.TrimRight(global.FlagUsages(), "\n")
}

func (a *app) helpCmd(global *pflag.FlagSet, args []string) error {
	if len(args) == 0 {
		a.mainHelp(global)
		return nil
	}
	c := findCommand(args[0])
	if c == nil {
		return usagef("help: unknown command %q (commands: %s)", args[0], commandNames())
	}
	fs := c.flagSet(global)
	c.setup(fs)
	a.commandHelp(c, fs)
	return nil
}

func (a *app) commandHelp(c *command, fs *pflag.FlagSet) {
	local := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	global := pflag.NewFlagSet("global", pflag.ContinueOnError)
	global.SortFlags, local.SortFlags = false, false
	fs.VisitAll(func(f *pflag.Flag) {
		switch f.Name {
		case "addr", "token", "token-file", "tls", "ca-file", "cert-file", "key-file", "timeout", "help", "version":
			global.AddFlag(f)
		default:
			local.AddFlag(f)
		}
	})
	fmt.Fprintf(a.stdout, "%s\n\nUsage:\n  bulkheadctl %s\n\n%s\n", c.summary, c.usage, strings.TrimSpace(c.help))
	if local.HasFlags() {
		fmt.Fprintf(a.stdout, "\nFlags:\n%s\n", strings.TrimRight(local.FlagUsages(), "\n"))
	}
	fmt.Fprintf(a.stdout, "\nGlobal flags:\n%s\n\n%s\n", strings.TrimRight(global.FlagUsages(), "\n"), exitCodesHelp)
}

// nameArg returns the single NAME argument of a command.
func nameArg(cmd string, args []string) (string, error) {
	switch len(args) {
	case 1:
		return args[0], nil
	case 0:
		return "", usagef("%s: missing the bulkhead NAME (bulkheadctl %s NAME)", cmd, cmd)
	default:
		return "", usagef("%s: want one bulkhead NAME, got %d arguments: %s", cmd, len(args), strings.Join(args, " "))
	}
}

// noArgs refuses positional arguments.
func noArgs(cmd string, args []string) error {
	if len(args) > 0 {
		return usagef("%s: takes no arguments, got: %s", cmd, strings.Join(args, " "))
	}
	return nil
}
