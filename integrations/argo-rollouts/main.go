// Command laneway-argo-rollouts is an Argo Rollouts traffic router plugin that
// makes a LaneRoute the canary's traffic: SetWeight sets the lane's weight,
// SetHeaderRoute the headers that enter it, and VerifyWeight answers once every
// LaneEntry that lets the lane in reports routes carrying that weight, accepted
// by their gateways. Declared in argo-rollouts-config as `laneway/laneroute`.
package main

import (
	goPlugin "github.com/hashicorp/go-plugin"
	log "github.com/sirupsen/logrus"

	rolloutsPlugin "github.com/argoproj/argo-rollouts/rollout/trafficrouting/plugin/rpc"
)

func main() {
	log.SetFormatter(&log.TextFormatter{FullTimestamp: true})
	goPlugin.Serve(&goPlugin.ServeConfig{
		HandshakeConfig: goPlugin.HandshakeConfig{
			ProtocolVersion:  1,
			MagicCookieKey:   "ARGO_ROLLOUTS_RPC_PLUGIN",
			MagicCookieValue: "trafficrouter",
		},
		Plugins: map[string]goPlugin.Plugin{
			"RpcTrafficRouterPlugin": &rolloutsPlugin.RpcTrafficRouterPlugin{Impl: &Plugin{}},
		},
	})
}
