// Command bulkhead-demo shows Bulkhead at work. It has three modes.
//
// With no mode it is the demo on one machine: three fake upstreams (catalog,
// auth, orders), the bulkhead daemon, and a real Envoy in front of them, with
// live traffic. After a while catalog turns slow; the live table shows
// catalog's bulkhead fill up and shed while auth and orders stay fast.
//
//	make demo                     # until Ctrl-C
//	make demo DURATION=60s        # bin/bulkhead-demo --duration 60s
//
// The two other modes are the same demo split into processes, for
// docker-compose.yaml, where Envoy and the daemon run in containers of their
// own:
//
//	bulkhead-demo upstream catalog --listen :8081 --control :9080
//	bulkhead-demo traffic --envoy http://envoy:10000 --metrics http://bulkhead:9090/metrics \
//	    --control catalog=http://catalog:9080,auth=http://auth:9080,orders=http://orders:9080
//
// upstream serves one demo upstream with its usual response time, and a
// small control API (control.go) through which traffic slows it and reads
// its peak concurrency. traffic drives the demo's traffic through Envoy,
// slows catalog on the same schedule as the local demo, and prints the same
// table and summary.
//
// Ctrl-C (or SIGTERM) stops sending and lets the requests in flight finish
// for up to --drain-timeout; a second Ctrl-C cuts that wait short, and the
// summary counts both kinds. Every child process of the local demo runs in
// its own process group and is stopped on every exit path; on Linux the
// kernel also kills them if the demo itself dies.
package main
