package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// The image is multi-stage, ends on a minimal non-root base, runs the
// daemon, and its go build lines work on this tree (run here with the
// same environment, into a temporary directory).
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, string(readRepoFile(t, "Dockerfile")))
	var froms, builds []string
	var user, entrypoint string
	for _, in := range ins {
		switch in.Cmd {
		case "FROM":
			froms = append(froms, in.Args)
		case "RUN":
			if strings.Contains(in.Args, "go build") {
				builds = append(builds, in.Args)
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
	if testing.Short() {
		t.Skip("-short: not running the go build lines")
	}
	out := t.TempDir()
	envRE := regexp.MustCompile(`^([A-Z_]+=\S+\s+)*`)
	for _, b := range builds {
		env := strings.Fields(envRE.FindString(b))
		args := strings.Fields(strings.TrimPrefix(b, envRE.FindString(b)))
		if len(args) < 2 || args[0] != "go" || args[1] != "build" || !strings.Contains(b, "CGO_ENABLED=0") {
			t.Errorf("RUN %q: want CGO_ENABLED=0 go build ...", b)
			continue
		}
		for i, a := range args {
			if strings.HasPrefix(a, "/out/") {
				args[i] = filepath.Join(out, filepath.Base(a))
			}
			args[i] = strings.Trim(args[i], `"`)
		}
		// -ldflags="-s -w" was split by Fields: rejoin it.
		args = rejoinQuoted(args)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "go", args[1:]...)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), env...)
		if o, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("RUN %s: %v\n%s", b, err, o)
		}
		cancel()
	}
	if _, err := os.Stat(filepath.Join(out, "bulkhead")); err != nil {
		t.Errorf("the build lines did not produce bulkhead: %v", err)
	}
}

// rejoinQuoted joins args split inside a quoted value (-ldflags="-s -w").
func rejoinQuoted(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-ldflags=") && !strings.HasSuffix(a, "w") {
			for i+1 < len(args) && !strings.HasSuffix(a, "w") {
				i++
				a += " " + args[i]
			}
		}
		out = append(out, strings.ReplaceAll(a, `"`, ""))
	}
	return out
}
