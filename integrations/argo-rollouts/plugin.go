package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/argoproj/argo-rollouts/utils/plugin/types"
	log "github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// PluginName is the name the plugin is declared under in argo-rollouts-config and
	// configured under in a Rollout's trafficRouting.plugins.
	PluginName = "laneway/laneroute"
	// FieldManager owns the LaneRoute fields the plugin sets, so that a GitOps tool can
	// ignore them (Argo CD: ignoreDifferences with managedFieldsManagers).
	FieldManager = "laneway-argo-rollouts"
	timeout      = 10 * time.Second
)

var (
	laneRoutes  = schema.GroupVersionResource{Group: "laneway.io", Version: "v1alpha1", Resource: "laneroutes"}
	laneEntries = schema.GroupVersionResource{Group: "laneway.io", Version: "v1alpha1", Resource: "laneentries"}
	httpRoutes  = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
)

// Plugin is the traffic router: it holds a client of the cluster Argo Rollouts runs in.
type Plugin struct {
	client dynamic.Interface
}

// InitPlugin connects with the pod's service account, or $KUBECONFIG outside a cluster.
func (p *Plugin) InitPlugin() types.RpcError {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	}
	if err == nil {
		p.client, err = dynamic.NewForConfig(cfg)
	}
	return rpcError(err)
}

// UpdateHash has nothing to do: the canary's pods join the lane by their labels
// (canaryMetadata), not by their pod hash.
func (p *Plugin) UpdateHash(*v1alpha1.Rollout, string, string, []v1alpha1.WeightDestination) types.RpcError {
	return types.RpcError{}
}

// SetWeight sets the LaneRoute's weight: the share of requests in no lane that enter the lane.
func (p *Plugin) SetWeight(ro *v1alpha1.Rollout, weight int32, extra []v1alpha1.WeightDestination) types.RpcError {
	if len(extra) > 0 {
		return types.RpcError{ErrorString: PluginName + ": a lane takes one canary, not additional destinations"}
	}
	return rpcError(p.update(ro, func(s *State) error {
		s.Weight = &weight
		return nil
	}))
}

// SetHeaderRoute makes the step's headers enter the lane (the LaneRoute's match.headers), or
// removes them when the step has no match.
func (p *Plugin) SetHeaderRoute(ro *v1alpha1.Rollout, route *v1alpha1.SetHeaderRoute) types.RpcError {
	return rpcError(p.update(ro, func(s *State) error {
		if route == nil || len(route.Match) == 0 {
			s.Headers = nil
			return nil
		}
		headers, err := Headers(route.Match)
		s.Headers = headers
		return err
	}))
}

// SetMirrorRoute is refused: a lane serves its requests, it does not copy them.
func (p *Plugin) SetMirrorRoute(*v1alpha1.Rollout, *v1alpha1.SetMirrorRoute) types.RpcError {
	return types.RpcError{ErrorString: PluginName + ": lanes do not mirror traffic; use setHeaderRoute or setWeight"}
}

// RemoveManagedRoutes gives up every field the plugin set: the weight returns to its default,
// 0, and the header match to the lane header of the LaneEntries.
func (p *Plugin) RemoveManagedRoutes(ro *v1alpha1.Rollout) types.RpcError {
	return rpcError(p.update(ro, func(s *State) error {
		*s = State{}
		return nil
	}))
}

// VerifyWeight answers true once the LaneRoute has the weight and every LaneEntry whose
// requests it splits reports it for the lane, with each of its routes accepted by the gateway
// at the route's current generation.
func (p *Plugin) VerifyWeight(ro *v1alpha1.Rollout, weight int32, _ []v1alpha1.WeightDestination) (types.RpcVerified, types.RpcError) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	lr, err := p.laneRoute(ctx, ro)
	if err != nil {
		return types.NotVerified, rpcError(err)
	}
	entries, err := p.client.Resource(laneEntries).Namespace(ro.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return types.NotVerified, rpcError(err)
	}
	routes := map[string]*unstructured.Unstructured{}
	for _, name := range RoutesToCheck(lr, entries.Items) {
		r, err := p.client.Resource(httpRoutes).Namespace(ro.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return types.NotVerified, rpcError(err)
		}
		if err == nil {
			routes[name] = r
		}
	}
	if why := Unverified(lr, entries.Items, routes, weight); why != "" {
		log.WithField("rollout", ro.Namespace+"/"+ro.Name).Infof("weight %d not verified: %s", weight, why)
		return types.NotVerified, types.RpcError{}
	}
	return types.Verified, types.RpcError{}
}

// Type names the plugin in Argo Rollouts' messages.
func (p *Plugin) Type() string {
	return PluginName
}

// update applies, with the plugin's field manager, what change makes of the state the plugin
// set on the Rollout's LaneRoute.
func (p *Plugin) update(ro *v1alpha1.Rollout, change func(*State) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	lr, err := p.laneRoute(ctx, ro)
	if err != nil {
		return err
	}
	state, err := Owned(lr)
	if err != nil {
		return err
	}
	if err := change(&state); err != nil {
		return err
	}
	if state.Headers != nil && HasForeignHeaders(lr) {
		return fmt.Errorf("LaneRoute %s has match.headers of its own: a header route would replace them; "+
			"remove them or route the canary with another LaneRoute", lr.GetName())
	}
	_, err = p.client.Resource(laneRoutes).Namespace(ro.Namespace).Apply(ctx, lr.GetName(),
		state.Apply(lr.GetName(), ro.Namespace), metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	return err
}

// laneRoute reads the LaneRoute the Rollout's plugin config names.
func (p *Plugin) laneRoute(ctx context.Context, ro *v1alpha1.Rollout) (*unstructured.Unstructured, error) {
	if p.client == nil {
		return nil, fmt.Errorf("%s: not initialised", PluginName)
	}
	name, err := LaneRouteName(ro)
	if err != nil {
		return nil, err
	}
	lr, err := p.client.Resource(laneRoutes).Namespace(ro.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("LaneRoute %q not found in namespace %s (trafficRouting.plugins[%q].laneRoute)",
			name, ro.Namespace, PluginName)
	}
	return lr, err
}

// Config is the plugin's part of a Rollout: trafficRouting.plugins["laneway/laneroute"].
type Config struct {
	// LaneRoute names the LaneRoute, in the Rollout's namespace, whose lane the canary's pods
	// join through canaryMetadata.labels.
	LaneRoute string `json:"laneRoute"`
}

// LaneRouteName reads the LaneRoute's name from the Rollout's plugin config.
func LaneRouteName(ro *v1alpha1.Rollout) (string, error) {
	var raw json.RawMessage
	if c := ro.Spec.Strategy.Canary; c != nil && c.TrafficRouting != nil {
		raw = c.TrafficRouting.Plugins[PluginName]
	}
	var cfg Config
	if len(raw) == 0 {
		return "", fmt.Errorf("trafficRouting.plugins[%q] is missing", PluginName)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("trafficRouting.plugins[%q]: %v", PluginName, err)
	}
	if cfg.LaneRoute == "" {
		return "", fmt.Errorf("trafficRouting.plugins[%q].laneRoute is required", PluginName)
	}
	return cfg.LaneRoute, nil
}

func rpcError(err error) types.RpcError {
	if err == nil {
		return types.RpcError{}
	}
	log.Error(err)
	return types.RpcError{ErrorString: err.Error()}
}
