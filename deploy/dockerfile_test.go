package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// instruction is one Dockerfile instruction (continuation lines joined).
type instruction struct {
	Cmd  string // upper case: FROM, RUN, COPY, ...
	Args string
}

func parseDockerfile(t *testing.T, data string) []instruction {
	t.Helper()
	var out []instruction
	var cur string
	for _, line := range strings.Split(data, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		cur += trimmed
		cmd, args, _ := strings.Cut(cur, " ")
		out = append(out, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)})
		cur = ""
	}
	return out
}

// Values the test gives the Dockerfile's build arguments, as a release
// does: the binaries' --version must show them.
const (
	testVersion  = "v9.8.7-test"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
)

// The image is multi-stage, ends on a minimal non-root base, runs the
// daemon, and its go build lines work on this tree (run here with the
// same environment and the build arguments a release passes, into a
// temporary directory): the daemon they build prints the stamped version.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, string(readRepoFile(t, "Dockerfile")))
	var froms, builds []string
	var user, entrypoint string
	args := map[string]string{
		"VERSION": testVersion, "REVISION": testRevision,
		// BuildKit's, for the platform built for.
		"TARGETOS": "linux", "TARGETARCH": runtime.GOARCH,
	}
	for _, in := range ins {
		switch in.Cmd {
		case "ARG":
			for _, a := range strings.Fields(in.Args) {
				name, def, _ := strings.Cut(a, "=")
				if _, set := args[name]; !set {
					args[name] = strings.Trim(def, `"`)
				}
			}
		case "FROM":
			froms = append(froms, in.Args)
		case "RUN":
			if strings.Contains(in.Args, "go build") {
				builds = append(builds, os.Expand(in.Args, func(k string) string { return args[k] }))
			}
		case "USER":
			user = in.Args
		case "ENTRYPOINT":
			entrypoint = in.Args
		}
	}
	if len(froms) < 2 || !strings.Contains(froms[0], " AS build") {
		t.Errorf("FROM lines %q: want a build stage and a runtime stage", froms)
	}
	if last := froms[len(froms)-1]; !strings.HasPrefix(last, "gcr.io/distroless/static") || !strings.Contains(last, ":nonroot") {
		t.Errorf("runtime base %q: want distroless static, nonroot", last)
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q: want a non-root uid", user)
	}
	if entrypoint != `["/usr/local/bin/bulkhead"]` {
		t.Errorf("ENTRYPOINT %s", entrypoint)
	}
	if len(builds) == 0 {
		t.Fatal("no go build in the Dockerfile")
	}
	for _, b := range builds {
		// Reproducible: no file paths and no VCS state of the build machine.
		for _, f := range []string{"-trimpath", "-buildvcs=false"} {
			if !slices.Contains(shellWords(b), f) {
				t.Errorf("RUN %s: want %s", b, f)
			}
		}
	}
	if testing.Short() {
		t.Skip("-short: not running the go build lines")
	}
	out := t.TempDir()
	envRE := regexp.MustCompile(`^([A-Z_]+=\S+\s+)*`)
	for _, b := range builds {
		env := strings.Fields(envRE.FindString(b))
		words := shellWords(strings.TrimPrefix(b, envRE.FindString(b)))
		if len(words) < 2 || words[0] != "go" || words[1] != "build" || !strings.Contains(b, "CGO_ENABLED=0") {
			t.Errorf("RUN %q: want CGO_ENABLED=0 go build ...", b)
			continue
		}
		for i, a := range words {
			if strings.HasPrefix(a, "/out/") {
				words[i] = out + strings.TrimPrefix(a, "/out") // "/out/" stays a directory
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", words[1:]...)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), env...)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("RUN %s: %v\n%s", b, err, o)
		}
		cancel()
	}
	for _, prog := range []string{"bulkhead", "bulkheadctl"} {
		bin := filepath.Join(out, prog)
		if _, err := os.Stat(bin); err != nil {
			t.Errorf("the build lines did not produce %s: %v", prog, err)
			continue
		}
		if runtime.GOOS != "linux" {
			continue // built for linux: cannot run here
		}
		got, err := exec.Command(bin, "--version").Output()
		want := prog + " " + testVersion + " (revision " + testRevision[:12] + ") go"
		if err != nil || !strings.HasPrefix(string(got), want) {
			t.Errorf("%s --version = %q, %v; want it to start %q", prog, got, err, want)
		}
	}
}

// shellWords splits a command line at blanks outside double quotes and
// drops the quotes (-ldflags="-s -w" is one word, -ldflags=-s -w).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}
