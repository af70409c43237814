package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// devel is what Go reports as the main module's version when it cannot
// tell one (a build from a work tree without a matching tag, or go run).
const devel = "(devel)"

// String returns the version line of program prog, for example
//
//	bulkhead v0.3.1 (revision 1fabe5e0c1d2, 2026-11-24T02:19:53Z, modified) go1.26.8
//
// from the running binary's build information.
func String(prog string) string {
	bi, _ := debug.ReadBuildInfo() // nil without build info: Describe says so
	return Describe(prog, bi)
}

// Describe is String for the build information bi (nil when the binary
// carries none). A missing version reads "(devel)", and a missing
// revision "revision unknown" (a build outside a VCS checkout, or with
// -buildvcs=false).
func Describe(prog string, bi *debug.BuildInfo) string {
	ver, goVer := devel, "go version unknown"
	var rev, at string
	var modified bool
	if bi != nil {
		if v := bi.Main.Version; v != "" {
			ver = v
		}
		if bi.GoVersion != "" {
			goVer = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	var vcs []string
	if rev == "" {
		vcs = append(vcs, "revision unknown")
	} else {
		vcs = append(vcs, "revision "+shortRev(rev))
		if at != "" {
			vcs = append(vcs, at)
		}
		if modified {
			vcs = append(vcs, "modified")
		}
	}
	return fmt.Sprintf("%s %s (%s) %s", prog, ver, strings.Join(vcs, ", "), goVer)
}

// shortRev keeps the first 12 hex digits of a revision, as git does for
// a short but unambiguous name.
func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
