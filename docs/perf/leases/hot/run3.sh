#!/bin/bash
# the harness's rate without Envoy: limit 1200 at 0.4 (about 2,540 Checks/s), one bulkhead
set -u
cd /work/main
for R in 1 2; do
common="-n 10 -bulkheads 1 -limit 1200 -load 0.4 -tenants 0 -storm=false -idle-window 10s -warmup 5s -window 20s -health -1ns -daemon /tmp/bulkhead-main"
for c in memory:1:worker leases:1:worker leases:2:worker; do
  IFS=: read l n s <<<"$c"
  out=/tmp/hot/v3-r$R-$l-$n
  echo "== $(date +%T) r$R $c loadavg $(cut -d' ' -f1 /proc/loadavg)"
  /tmp/meshsim run $common -ledger $l -replicas $n -spread $s -out $out > $out.log 2>&1 || echo "FAILED $c"
done
done
