#!/bin/bash
# rounds of: memory, leases x1, leases x2 (worker) at loads 0.2 and 0.4 of a limit of 400, one bulkhead
set -u
cd /work/main
for R in 1 2; do
for LOAD in 0.2 0.4; do
common="-n 10 -bulkheads 1 -limit 400 -load $LOAD -tenants 0 -storm=false -idle-window 10s -warmup 5s -window 20s -health -1ns -daemon /tmp/bulkhead-main"
for c in memory:1:worker leases:1:worker leases:2:worker; do
  IFS=: read l n s <<<"$c"
  out=/tmp/hot/v2-r$R-l$LOAD-$l-$n
  echo "== $(date +%T) r$R load $LOAD $c loadavg $(cut -d' ' -f1 /proc/loadavg)"
  /tmp/meshsim run $common -ledger $l -replicas $n -spread $s -out $out > $out.log 2>&1 || echo "FAILED $c"
done
done
done
