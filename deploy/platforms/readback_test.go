package platforms

import (
	"fmt"
	"reflect"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"
)

// subsetDiff lists where got does not hold want: every key of every map
// of want must be in got with an equal value; lists must have the same
// length. Numbers compare by value, resource quantities by amount, and an
// empty map or list in want is satisfied by its absence (the server does
// not store empty fields).
func subsetDiff(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			if len(w) == 0 && got == nil {
				return nil
			}
			return []string{fmt.Sprintf("%s: sent a map, stored %T", orRoot(path), got)}
		}
		var diffs []string
		keys := make([]string, 0, len(w))
		for key := range w {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			gv, present := g[key]
			if !present && !isEmpty(w[key]) {
				diffs = append(diffs, fmt.Sprintf("%s.%s: sent, not stored (dropped by the server)", path, key))
				continue
			}
			diffs = append(diffs, subsetDiff(path+"."+key, w[key], gv)...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok {
			if len(w) == 0 && got == nil {
				return nil
			}
			return []string{fmt.Sprintf("%s: sent a list, stored %T", orRoot(path), got)}
		}
		if len(g) != len(w) {
			return []string{fmt.Sprintf("%s: sent %d items, stored %d", path, len(w), len(g))}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, subsetDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	default:
		if scalarEqual(want, got) {
			return nil
		}
		return []string{fmt.Sprintf("%s: sent %#v, stored %#v", path, want, got)}
	}
}

func orRoot(path string) string {
	if path == "" {
		return "(object)"
	}
	return path
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// scalarEqual compares YAML's float64 with the server's int64, and
// resource quantities ("0.5" and "500m") by amount.
func scalarEqual(want, got any) bool {
	if reflect.DeepEqual(want, got) {
		return true
	}
	if wf, ok := number(want); ok {
		gf, ok := number(got)
		return ok && wf == gf
	}
	ws, ok1 := want.(string)
	gs, ok2 := got.(string)
	if ok1 && ok2 {
		wq, err1 := resource.ParseQuantity(ws)
		gq, err2 := resource.ParseQuantity(gs)
		return err1 == nil && err2 == nil && wq.Cmp(gq) == 0
	}
	return false
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}
