//go:build tools

// Package kubeserver only records, for go mod tidy, the commands this module
// builds: kube-apiserver from k8s.io/kubernetes, and ./etcd.
package kubeserver

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
