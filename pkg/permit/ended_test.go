package permit

import (
	"fmt"
	"testing"
)

func TestEndedTokensBounded(t *testing.T) {
	var ended EndedTokens
	tok := func(i int) string { return fmt.Sprintf("%022d", i) }
	for i := range maxEndedTokens {
		ended.Add(tok(i))
	}
	if !ended.Has(tok(0)) || !ended.Has(tok(maxEndedTokens-1)) {
		t.Fatal("full: want every token remembered")
	}
	ended.Add(tok(maxEndedTokens))
	if ended.Has(tok(0)) || !ended.Has(tok(maxEndedTokens/2)) || !ended.Has(tok(maxEndedTokens)) {
		t.Fatal("past full: want the older half forgotten, the newer kept")
	}
	ended.Add("short")
	if ended.Has("short") {
		t.Fatal("a token no Grant issues was remembered")
	}
}
