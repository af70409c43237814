#!/bin/bash
set -u
for i in 1 2; do
for v in before after; do
  dir=/work/main; [ $v = before ] && dir=/tmp/wt-before
  echo "== $(date +%T) $v $i loadavg $(cut -d' ' -f1 /proc/loadavg)"
  (cd $dir && ENVOY_BIN=/work/main/.venv/bin/envoy go run ./e2e/benchharness -micro=false -heartbeat=false -diagnostic=false -rounds 3 -open-rounds 3 -configs bulkhead-shares -out /tmp/ab/$v-$i > /tmp/ab/$v-$i.log 2>&1) || echo "FAILED $v $i"
done
done
echo "== $(date +%T) done"
