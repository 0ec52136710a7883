// Command kubectl is the stock kubectl, built from the same pinned
// Kubernetes modules as envtest so client and server versions match.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // exec/oidc auth plugins
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// Apply -v early so that command construction (kuberc, plugins) logs too.
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
