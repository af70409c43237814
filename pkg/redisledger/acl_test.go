package redisledger

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkhead-mesh/bulkhead/pkg/admission"
	"github.com/bulkhead-mesh/bulkhead/pkg/bulkhead"
)

// The ACL docs/redis.md gives a dedicated user lets the ledger do all it
// does: the scripts, the wake-ups, and the run ids it reads (INFO) to
// notice a Redis that restarted or failed over.
func TestDocumentedACL(t *testing.T) {
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	var acl []any
	for _, line := range strings.Split(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "ACL SETUSER bulkhead "); ok {
			acl = []any{"ACL", "SETUSER", "bulkhead"}
			for _, f := range strings.Fields(rest) {
				acl = append(acl, strings.Replace(f, ">PASSWORD", ">pw", 1))
			}
		}
	}
	if acl == nil {
		t.Fatal("docs/redis.md gives no ACL SETUSER bulkhead line")
	}
	f := newFixture(t)
	if err := f.rdb.Do(context.Background(), acl...).Err(); err != nil {
		t.Fatalf("the documented ACL: %v", err)
	}
	user := redis.NewClient(&redis.Options{Addr: f.redis.Addr, Username: "bulkhead", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { user.Close() })
	l := New(user, Config{Prefix: "bulkhead:", Replica: "r1", Timeout: time.Second, Tick: 100 * time.Millisecond}, f.obs, f.rec, nil)
	l.tick(context.Background(), func() []string { return []string{"orders"} })
	if l.State() != admission.Strict {
		t.Fatalf("state %v after a tick as the documented user, want strict", l.State())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.Acquire(ctx, req("orders", settings(2, 0, 0), bulkhead.Normal)); err != nil {
		t.Fatalf("Acquire as the documented user: %v", err)
	}
	if ids, err := l.runIDs(ctx); err != nil || len(ids) != 1 {
		t.Fatalf("run ids as the documented user: %v, %v: a restart or failover would go unnoticed", ids, err)
	}
}
