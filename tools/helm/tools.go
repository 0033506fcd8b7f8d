//go:build tools

// Package tools records the helm command as a dependency of this module, so that
// `go build helm.sh/helm/v3/cmd/helm` resolves through go.mod and go.sum.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
