package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// version and revision are set only by the linker (-X, see the package
// comment) and never assigned at run time: a release build's version and
// the full commit hash it was built from. Empty when not stamped.
var (
	version  string
	revision string
)

// devel is what Go reports as the main module's version when it cannot
// tell one (a build from a work tree without a matching tag, or go run).
const devel = "(devel)"

// Stamp is what a build stamped at link time. An empty field was not
// stamped, and the build information supplies it.
type Stamp struct {
	Version  string // e.g. v0.3.1
	Revision string // the full commit hash
}

// Linked returns the values the linker stamped into this binary.
func Linked() Stamp { return Stamp{Version: version, Revision: revision} }

// String returns the version line of program prog, for example
//
//	bulkhead v0.3.1 (revision 1fabe5e0c1d2, 2026-11-24T02:19:53Z) go1.26.8
//
// from the link-time stamp and the running binary's build information.
func String(prog string) string {
	bi, _ := debug.ReadBuildInfo() // nil without build info: Describe says so
	return Describe(prog, Linked(), bi)
}

// Describe is String for the stamp s and the build information bi (nil
// when the binary carries none). A stamped field wins over the build
// information; the commit time and the modified flag come from the build
// information only when it names the same revision. A missing version
// reads "(devel)", and a missing revision "revision unknown" (a build
// outside a VCS checkout, or with -buildvcs=false, and not stamped).
func Describe(prog string, s Stamp, bi *debug.BuildInfo) string {
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
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				rev = kv.Value
			case "vcs.time":
				at = kv.Value
			case "vcs.modified":
				modified = kv.Value == "true"
			}
		}
	}
	if s.Version != "" {
		ver = s.Version
	}
	if s.Revision != "" && s.Revision != rev {
		rev, at, modified = s.Revision, "", false
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
