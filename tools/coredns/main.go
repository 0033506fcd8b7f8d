// Command coredns is CoreDNS with only the plugins the local node's cluster DNS uses: it
// answers names under cluster.local from the Kubernetes API and nothing else, so no query
// from a test pod ever leaves the machine.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() {
	coremain.Run()
}
