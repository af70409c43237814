package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	adminv1 "github.com/bulkhead-mesh/bulkhead/proto/bulkhead/admin/v1"
)

// bearerCreds sends the token with every call. It does not require TLS:
// loopback and in-mesh deployments may run without it.
type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerCreds) RequireTransportSecurity() bool { return false }

// client connects (lazily) to the admin API.
func (a *app) client() (adminv1.AdminServiceClient, error) {
	if a.conn == nil {
		opts, err := a.dialOptions()
		if err != nil {
			return nil, err
		}
		conn, err := grpc.NewClient("passthrough:///"+a.g.addr, opts...)
		if err != nil {
			return nil, usagef("--addr %q: %v", a.g.addr, err)
		}
		a.conn = conn
	}
	return adminv1.NewAdminServiceClient(a.conn), nil
}

func (a *app) dialOptions() ([]grpc.DialOption, error) {
	var opts []grpc.DialOption
	if a.g.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerCreds(a.g.token)))
	}
	useTLS := a.g.tls || a.g.caFile != "" || a.g.certFile != "" || a.g.keyFile != ""
	if !useTLS {
		return append(opts, grpc.WithTransportCredentials(insecure.NewCredentials())), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if a.g.caFile != "" {
		pem, err := os.ReadFile(a.g.caFile)
		if err != nil {
			return nil, usagef("--ca-file: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--ca-file: %s holds no PEM certificate", a.g.caFile)
		}
		cfg.RootCAs = pool
	}
	if (a.g.certFile == "") != (a.g.keyFile == "") {
		return nil, usagef("--cert-file and --key-file go together")
	}
	if a.g.certFile != "" {
		pair, err := tls.LoadX509KeyPair(a.g.certFile, a.g.keyFile)
		if err != nil {
			return nil, usagef("--cert-file, --key-file: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg))), nil
}

// callCtx bounds one call by --timeout.
func (a *app) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.g.timeout)
}

// explain turns an error of a call into a message a person understands,
// with the exit code scripts rely on.
func (a *app) explain(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return &exitError{exitRefused, err.Error()}
	}
	addr := a.g.addr
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		if strings.Contains(msg, "shutting down") {
			return &exitError{exitConnect, fmt.Sprintf("the admin API at %s is shutting down", addr)}
		}
		return &exitError{exitConnect, fmt.Sprintf("cannot connect to the admin API at %s: %s — %s", addr, connectReason(msg), a.connectHint(msg))}
	case codes.DeadlineExceeded:
		return &exitError{exitConnect, fmt.Sprintf("the admin API at %s did not answer within %s (--timeout)", addr, a.g.timeout)}
	case codes.Unauthenticated:
		hint := "pass --token, --token-file or set BULKHEADCTL_TOKEN"
		if a.g.token != "" {
			hint = "check the token (--token, --token-file or BULKHEADCTL_TOKEN)"
		}
		return &exitError{exitConnect, fmt.Sprintf("the admin API at %s refused the credentials: %s — %s", addr, trimPrefix(msg), hint)}
	case codes.PermissionDenied:
		return &exitError{exitConnect, fmt.Sprintf("the admin API at %s denied access: %s", addr, trimPrefix(msg))}
	case codes.NotFound:
		return &exitError{exitRefused, msg + " (bulkheadctl status lists the bulkheads)"}
	case codes.InvalidArgument:
		return &exitError{exitRefused, "refused: " + msg + fieldHint(st)}
	case codes.FailedPrecondition:
		return &exitError{exitRefused, "refused: " + msg}
	case codes.Unimplemented:
		return &exitError{exitRefused, fmt.Sprintf("the server at %s does not implement %s — is it a Bulkhead admin listener?", addr, "bulkhead.admin.v1.AdminService")}
	case codes.Canceled:
		return &exitError{exitRefused, "cancelled"}
	default:
		return &exitError{exitRefused, fmt.Sprintf("the admin API at %s failed: %s: %s", addr, st.Code(), msg)}
	}
}

// fieldHint names the flags of the fields the server refused.
func fieldHint(st *status.Status) string {
	var flags []string
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, v := range br.GetFieldViolations() {
			switch f := v.GetField(); f {
			case "":
			case "reserve":
				flags = append(flags, "--reserve-critical/--reserve-normal")
			default:
				flags = append(flags, "--"+strings.ReplaceAll(f, "_", "-"))
			}
		}
	}
	if len(flags) == 0 {
		return ""
	}
	return " (check " + strings.Join(flags, ", ") + ")"
}

// connectReason keeps the useful end of a transport error.
func connectReason(msg string) string {
	switch {
	case strings.Contains(msg, "connection refused"):
		return "connection refused"
	case strings.Contains(msg, "no such host"):
		return "no such host"
	case strings.Contains(msg, "i/o timeout"):
		return "connection timed out"
	}
	msg = strings.TrimPrefix(msg, "connection error: desc = ")
	msg = strings.Trim(msg, `"`)
	return strings.TrimPrefix(msg, "transport: ")
}

func (a *app) connectHint(msg string) string {
	switch {
	case strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:") || strings.Contains(msg, "certificate"):
		return "check --tls, --ca-file, --cert-file and --key-file"
	case strings.Contains(msg, "server preface") || strings.Contains(msg, "http2") || strings.Contains(msg, "frame"):
		return "does the admin listener use TLS (then add --tls) or not (then drop it)?"
	}
	return "is bulkhead running with listen.admin set?"
}

func trimPrefix(msg string) string {
	for _, p := range []string{"unauthenticated: ", "permission denied: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}
