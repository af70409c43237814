package server

import "github.com/bulkhead-mesh/bulkhead/pkg/config"

// kindsOf is what each bulkhead of cfg counts, for the metrics.
func kindsOf(cfg *config.Config) map[string]string {
	kinds := make(map[string]string, len(cfg.Bulkheads))
	for name, b := range cfg.Bulkheads {
		kinds[name] = string(b.Kind())
	}
	return kinds
}
