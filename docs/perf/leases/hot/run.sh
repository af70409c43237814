#!/bin/bash
# one round: memory, leases x1, leases x2 worker, leases x2 request; hot bulkhead at half its limit
set -u
R=$1
cd /work/main
common="-n 10 -bulkheads 1 -limit 400 -load ${LOAD:-0.5} -tenants 0 -storm=false -warmup 5s -window 20s -health -1ns -daemon /tmp/bulkhead-main"
for c in memory:1:request leases:1:request leases:2:worker leases:2:request; do
  IFS=: read l n s <<<"$c"
  out=/tmp/hot/l${LOAD:-0.5}-r$R-$l-$n-$s
  echo "== $(date +%T) $c load $(cut -d' ' -f1 /proc/loadavg)"
  /tmp/meshsim run $common -ledger $l -replicas $n -spread $s -out $out > $out.log 2>&1 || echo "FAILED $c"
done
