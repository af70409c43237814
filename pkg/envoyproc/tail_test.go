package envoyproc

import (
	"testing"
)

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"empty", nil, ""},
		{"blank", []string{" \n"}, ""},
		{"fits", []string{"ab", "cd"}, "; envoy stderr:\nabcd"},
		{"keeps the tail", []string{"0123", "45678"}, "; envoy stderr:\n345678"},
		{"one big write", []string{"0123456789"}, "; envoy stderr:\n456789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &tailBuffer{max: 6}
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := b.suffix(); got != tt.want {
				t.Errorf("suffix() = %q, want %q", got, tt.want)
			}
			if len(b.buf) > b.max {
				t.Errorf("kept %d bytes, max %d", len(b.buf), b.max)
			}
		})
	}
}
