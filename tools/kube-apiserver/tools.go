//go:build tools

// Package tools records kube-apiserver as a dependency of this module, so that
// `go build k8s.io/kubernetes/cmd/kube-apiserver` resolves through go.mod and go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
