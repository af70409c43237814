#!/bin/sh
# the daemon with two Ps whatever its CPUs (GOMAXPROCS is otherwise the CPUs it may run on)
GOMAXPROCS=2 exec /tmp/bulkhead-pin "$@"
