// Command bulkheadctl is the operator CLI of Bulkhead's admin API: it shows
// every bulkhead's state and changes limits while traffic flows.
//
//	bulkheadctl status
//	bulkheadctl set catalog --max-concurrent 20
//	bulkheadctl watch
//
// Run `bulkheadctl help` for the commands, flags and exit codes (0 ok,
// 1 refused by the server, 2 usage error, 3 cannot connect or not
// authenticated).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, isTerminal(os.Stdout))
	stop()
	os.Exit(code)
}

// isTerminal reports whether f is a character device (a terminal), where
// watch redraws in place.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
