#!/bin/bash
# the in-memory daemon at half the rate: what one process costs per request at the rate each of two replicas serves
set -u
cd /work/main
for R in 1 2; do
  out=/tmp/hot/v4-r$R-memory-half
  echo "== $(date +%T) r$R loadavg $(cut -d' ' -f1 /proc/loadavg)"
  /tmp/meshsim run -n 10 -bulkheads 1 -limit 1200 -load 0.2 -tenants 0 -storm=false -idle-window 10s -warmup 5s -window 20s -health -1ns -daemon /tmp/bulkhead-main -ledger memory -spread worker -out $out > $out.log 2>&1 || echo FAILED
done
