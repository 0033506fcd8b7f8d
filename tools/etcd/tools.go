//go:build tools

// Package tools records the etcd server as a dependency of this module, so that
// `go build go.etcd.io/etcd/server/v3` resolves through go.mod and go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
