// Command kube-proxy is upstream's kube-proxy (k8s.io/kubernetes/cmd/kube-proxy at the version
// go.mod pins), built exactly as upstream's own main does, for the tests' network namespace:
// tests/kube_proxy.rs runs it in nftables mode against the local kube-apiserver (tests/envtest).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // for client metric registration
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	command := app.NewProxyCommand()
	code := cli.Run(command)
	os.Exit(code)
}
