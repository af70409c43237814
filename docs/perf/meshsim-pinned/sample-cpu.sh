#!/bin/bash
# every second: the daemon's and the simulator's CPU in cores over that second, from /proc/PID/stat (utime+stime)
# usage: pin-sample.sh DONEFILE  (stops when DONEFILE exists)
T=$(getconf CLK_TCK)
pd=""; ps_=""; prev_d=0; prev_s=0
while [ ! -e "$1" ]; do
  d=$(pgrep -f "^/tmp/bulkhead-pin --config" | head -1); s=$(pgrep -f "meshsim run -daemon /tmp/bulkhead-pin" | grep -v "^$$" | while read p; do [ "$(cat /proc/$p/comm 2>/dev/null)" = meshsim ] && echo $p; done | head -1)
  cd_=0; cs=0
  [ -n "$d" ] && cd_=$(awk '{print $14+$15}' /proc/$d/stat 2>/dev/null || echo 0)
  [ -n "$s" ] && cs=$(awk '{print $14+$15}' /proc/$s/stat 2>/dev/null || echo 0)
  [ "$d" != "$pd" ] && prev_d=$cd_
  [ "$s" != "$ps_" ] && prev_s=$cs
  echo "$(date +%T) daemon=${d:--} $(echo "scale=2; ($cd_-$prev_d)/$T" | bc) sim=${s:--} $(echo "scale=2; ($cs-$prev_s)/$T" | bc) load=$(cut -d' ' -f1 /proc/loadavg)"
  pd=$d; ps_=$s; prev_d=$cd_; prev_s=$cs
  sleep 1
done
