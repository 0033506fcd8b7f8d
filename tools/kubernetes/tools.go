//go:build tools

// Package tools records the Kubernetes components as dependencies of this module, so that
// `go build k8s.io/kubernetes/cmd/<component>` resolves through go.mod and go.sum. All of them
// come from one k8s.io/kubernetes release: the API server alone for API-only tests, the rest for
// the local single-node cluster (`make cluster-up`).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
