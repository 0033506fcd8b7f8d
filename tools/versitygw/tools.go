//go:build tools

// Package tools pins the versitygw module so `go build` can build its command from this module.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
