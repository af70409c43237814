package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i+1 < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	tests := []struct {
		name  string
		stamp Stamp
		bi    *debug.BuildInfo
		want  string
	}{
		{"no build info", Stamp{}, nil, "bulkhead (devel) (revision unknown) go version unknown"},
		{"devel, no vcs", Stamp{}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"bulkhead (devel) (revision unknown) go1.26.8"},
		{"empty version", Stamp{}, &debug.BuildInfo{GoVersion: "go1.26.8"},
			"bulkhead (devel) (revision unknown) go1.26.8"},
		{"tagged, clean", Stamp{}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.1"},
			Settings: vcs("vcs.revision", "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000", "vcs.time", "2026-11-24T02:19:53Z", "vcs.modified", "false")},
			"bulkhead v0.3.1 (revision 1fabe5e0c1d2, 2026-11-24T02:19:53Z) go1.26.8"},
		{"pseudo-version, modified", Stamp{}, &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261124021953-1fabe5e0c1d2+dirty"},
			Settings: vcs("vcs.revision", "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000", "vcs.modified", "true")},
			"bulkhead v0.0.0-20261124021953-1fabe5e0c1d2+dirty (revision 1fabe5e0c1d2, modified) go1.26.8"},
		{"short revision kept whole", Stamp{}, &debug.BuildInfo{Main: debug.Module{Version: "v1.0.0"}, Settings: vcs("vcs.revision", "abc")},
			"bulkhead v1.0.0 (revision abc) go version unknown"},
		{"stamped, no build info", Stamp{Version: "v0.4.0", Revision: "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000"}, nil,
			"bulkhead v0.4.0 (revision 1fabe5e0c1d2) go version unknown"},
		{"stamp wins over devel and no vcs", Stamp{Version: "v0.4.0", Revision: "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000"},
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"bulkhead v0.4.0 (revision 1fabe5e0c1d2) go1.26.8"},
		{"stamped version only: revision from vcs", Stamp{Version: "v0.4.0"}, &debug.BuildInfo{GoVersion: "go1.26.8",
			Settings: vcs("vcs.revision", "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000", "vcs.time", "2026-11-24T02:19:53Z")},
			"bulkhead v0.4.0 (revision 1fabe5e0c1d2, 2026-11-24T02:19:53Z) go1.26.8"},
		{"same revision stamped: vcs time and modified kept", Stamp{Revision: "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000"},
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.0"},
				Settings: vcs("vcs.revision", "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000", "vcs.time", "2026-11-24T02:19:53Z", "vcs.modified", "true")},
			"bulkhead v0.4.0 (revision 1fabe5e0c1d2, 2026-11-24T02:19:53Z, modified) go1.26.8"},
		{"other revision stamped: vcs time and modified dropped", Stamp{Revision: "aaaabbbbccccdddd"},
			&debug.BuildInfo{GoVersion: "go1.26.8",
				Settings: vcs("vcs.revision", "1fabe5e0c1d2aaaabbbbccccddddeeeeffff0000", "vcs.time", "2026-11-24T02:19:53Z", "vcs.modified", "true")},
			"bulkhead (devel) (revision aaaabbbbcccc) go1.26.8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Describe("bulkhead", tt.stamp, tt.bi); got != tt.want {
				t.Errorf("Describe = %q\nwant       %q", got, tt.want)
			}
		})
	}
}

// A test binary is not stamped, and has build information; String names
// the program and Go.
func TestStringOfThisBinary(t *testing.T) {
	if s := Linked(); s != (Stamp{}) {
		t.Errorf("Linked = %+v in an unstamped test binary", s)
	}
	got := String("prog")
	if !strings.HasPrefix(got, "prog ") || !strings.Contains(got, "go") {
		t.Errorf("String = %q", got)
	}
}
