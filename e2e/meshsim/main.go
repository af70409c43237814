package meshsim

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
)

// Main is cmd/meshsim: it parses args, runs one command and returns the
// exit code (0 ok, 1 failed, 2 usage).
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	cmd := "run"
	if len(args) > 0 && (args[0] == "capture" || args[0] == "calibrate" || args[0] == "run") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("meshsim "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	envoyBin := fs.String("envoy", "", "Envoy binary (default: $ENVOY_BIN, .venv/bin/envoy, envoy on PATH)")
	out := fs.String("out", "", "output directory")
	var err error
	switch cmd {
	case "capture":
		if err = fs.Parse(args); err != nil {
			return 2
		}
		if *out == "" {
			*out = "e2e/meshsim/captures"
		}
		err = Capture(ctx, *envoyBin, *out)
	default:
		return runMain(ctx, log, cmd, fs, args, envoyBin, out, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "meshsim:", err)
		return 1
	}
	return 0
}
