package main

import (
	"encoding/json"
	"fmt"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Header is one exact header match of a LaneRoute.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// State is what the plugin sets on a LaneRoute: nil fields are left to their other owners
// (or their defaults).
type State struct {
	Weight  *int32
	Headers []Header
}

// Owned reads the fields of lr that the plugin's field manager owns, with their values.
func Owned(lr *unstructured.Unstructured) (State, error) {
	var s State
	for _, m := range lr.GetManagedFields() {
		if m.Manager != FieldManager || m.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]json.RawMessage
		if err := json.Unmarshal(m.FieldsV1.Raw, &fields); err != nil {
			return s, fmt.Errorf("LaneRoute %s: managedFields: %v", lr.GetName(), err)
		}
		if _, ok := fields["f:spec"]["f:weight"]; ok {
			if w, found, _ := unstructured.NestedInt64(lr.Object, "spec", "weight"); found {
				weight := int32(w)
				s.Weight = &weight
			}
		}
		if _, ok := fields["f:spec"]["f:match"]; ok {
			s.Headers = headersOf(lr)
		}
	}
	return s, nil
}

// HasForeignHeaders tells whether lr has match.headers that the plugin did not set.
func HasForeignHeaders(lr *unstructured.Unstructured) bool {
	owned, _ := Owned(lr)
	return owned.Headers == nil && len(headersOf(lr)) > 0
}

func headersOf(lr *unstructured.Unstructured) []Header {
	list, _, _ := unstructured.NestedSlice(lr.Object, "spec", "match", "headers")
	headers := []Header{}
	for _, h := range list {
		m, _ := h.(map[string]interface{})
		name, _ := m["name"].(string)
		value, _ := m["value"].(string)
		headers = append(headers, Header{name, value})
	}
	return headers
}

// Apply is the server-side apply body of the state for the LaneRoute name in namespace.
func (s State) Apply(name, namespace string) *unstructured.Unstructured {
	spec := map[string]interface{}{}
	if s.Weight != nil {
		spec["weight"] = int64(*s.Weight)
	}
	if s.Headers != nil {
		headers := []interface{}{}
		for _, h := range s.Headers {
			headers = append(headers, map[string]interface{}{"name": h.Name, "value": h.Value})
		}
		spec["match"] = map[string]interface{}{"headers": headers}
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "laneway.io/v1alpha1",
		"kind":       "LaneRoute",
		"metadata":   map[string]interface{}{"name": name, "namespace": namespace},
		"spec":       spec,
	}}
}

// Headers turns a setHeaderRoute step's matches into LaneRoute headers: exact values only.
func Headers(matches []v1alpha1.HeaderRoutingMatch) ([]Header, error) {
	headers := []Header{}
	for _, m := range matches {
		v := m.HeaderValue
		if v == nil || v.Exact == "" || v.Prefix != "" || v.Regex != "" {
			return nil, fmt.Errorf("setHeaderRoute: header %q: a lane is entered by exact header values only", m.HeaderName)
		}
		headers = append(headers, Header{m.HeaderName, v.Exact})
	}
	return headers, nil
}

// Lane is the lane a LaneRoute resolved to (its name until laneway has resolved it).
func Lane(lr *unstructured.Unstructured) string {
	for _, path := range [][]string{{"status", "lane"}, {"spec", "lane"}} {
		if lane, _, _ := unstructured.NestedString(lr.Object, path...); lane != "" {
			return lane
		}
	}
	return lr.GetName()
}

// splitting is the entry's status of lane, for an entry whose requests in no lane the lanes'
// weights split (at a gateway, applyWeights not false); nil otherwise.
func splitting(entry *unstructured.Unstructured, lane string) map[string]interface{} {
	if _, mesh, _ := unstructured.NestedMap(entry.Object, "spec", "mesh"); mesh {
		return nil
	}
	if apply, found, _ := unstructured.NestedBool(entry.Object, "spec", "applyWeights"); found && !apply {
		return nil
	}
	lanes, _, _ := unstructured.NestedSlice(entry.Object, "status", "lanes")
	for _, l := range lanes {
		if m, _ := l.(map[string]interface{}); m["lane"] == lane {
			return m
		}
	}
	return nil
}

func entryRoutes(entry *unstructured.Unstructured) []string {
	list, _, _ := unstructured.NestedSlice(entry.Object, "status", "routes")
	names := []string{}
	for _, r := range list {
		if m, _ := r.(map[string]interface{}); m["name"] != nil {
			names = append(names, fmt.Sprint(m["name"]))
		}
	}
	return names
}

// RoutesToCheck lists the HTTPRoutes of the entries whose requests lr's weight splits.
func RoutesToCheck(lr *unstructured.Unstructured, entries []unstructured.Unstructured) []string {
	names := []string{}
	for i := range entries {
		if splitting(&entries[i], Lane(lr)) != nil {
			names = append(names, entryRoutes(&entries[i])...)
		}
	}
	return names
}

// Unverified says why weight is not yet in force for lr's lane ("" once it is): lr must carry
// it at a generation laneway resolved, and every entry it splits must report it, with each of
// its HTTPRoutes (routes, by name) accepted by every parent at the route's generation.
func Unverified(lr *unstructured.Unstructured, entries []unstructured.Unstructured,
	routes map[string]*unstructured.Unstructured, weight int32) string {
	if w, _, _ := unstructured.NestedInt64(lr.Object, "spec", "weight"); w != int64(weight) {
		return fmt.Sprintf("LaneRoute %s has weight %d", lr.GetName(), w)
	}
	if g, _, _ := unstructured.NestedInt64(lr.Object, "status", "observedGeneration"); g != lr.GetGeneration() {
		return fmt.Sprintf("laneway has not resolved generation %d of LaneRoute %s", lr.GetGeneration(), lr.GetName())
	}
	lane := Lane(lr)
	for i := range entries {
		entry := &entries[i]
		status := splitting(entry, lane)
		if status == nil {
			continue
		}
		if w, _ := status["weight"].(int64); w != int64(weight) {
			return fmt.Sprintf("LaneEntry %s reports weight %d for lane %s", entry.GetName(), w, lane)
		}
		for _, name := range entryRoutes(entry) {
			if why := notAccepted(routes[name]); why != "" {
				return fmt.Sprintf("HTTPRoute %s of LaneEntry %s: %s", name, entry.GetName(), why)
			}
		}
	}
	return ""
}

func notAccepted(route *unstructured.Unstructured) string {
	if route == nil {
		return "not found"
	}
	parents, _, _ := unstructured.NestedSlice(route.Object, "status", "parents")
	if len(parents) == 0 {
		return "no gateway has reported on it"
	}
	for _, p := range parents {
		m, _ := p.(map[string]interface{})
		conditions, _, _ := unstructured.NestedSlice(m, "conditions")
		accepted := false
		for _, c := range conditions {
			cm, _ := c.(map[string]interface{})
			g, _ := cm["observedGeneration"].(int64)
			if cm["type"] == "Accepted" && cm["status"] == "True" && g == route.GetGeneration() {
				accepted = true
			}
		}
		if !accepted {
			return fmt.Sprintf("not accepted at generation %d by %v", route.GetGeneration(), m["controllerName"])
		}
	}
	return ""
}
