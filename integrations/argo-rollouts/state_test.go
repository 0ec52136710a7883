package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func object(t *testing.T, text string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(text)); err != nil {
		t.Fatal(err)
	}
	return u
}

const gray = `{"apiVersion":"laneway.io/v1alpha1","kind":"LaneRoute",
 "metadata":{"name":"gray","generation":3,"managedFields":[
  {"manager":"kubectl","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:services":{}}}},
  {"manager":"laneway-argo-rollouts","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:weight":{}}}}]},
 "spec":{"services":["order"],"weight":20},
 "status":{"observedGeneration":3,"lane":"gray"}}`

func entry(name, extra string, weight int) string {
	return fmt.Sprintf(`{"apiVersion":"laneway.io/v1alpha1","kind":"LaneEntry","metadata":{"name":%q},
	 "spec":{%s},
	 "status":{"routes":[{"name":"%s-0"}],"lanes":[{"lane":"gray","headers":["x-lane: gray"],"weight":%d}]}}`,
		name, extra, name, weight)
}

func route(name string, generation, observed int, status string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"metadata": map[string]interface{}{"name": name, "generation": int64(generation)},
		"status": map[string]interface{}{"parents": []interface{}{map[string]interface{}{
			"controllerName": "traefik.io/gateway-controller",
			"conditions": []interface{}{map[string]interface{}{
				"type": "Accepted", "status": status, "observedGeneration": int64(observed)}},
		}}},
	}}
}

func TestOwnedReadsOnlyTheFieldsOfThePluginsManager(t *testing.T) {
	s, err := Owned(object(t, gray))
	if err != nil || s.Weight == nil || *s.Weight != 20 || s.Headers != nil {
		t.Fatalf("%+v %v", s, err)
	}
	body, _ := json.Marshal(s.Apply("gray", "shop").Object)
	want := `{"apiVersion":"laneway.io/v1alpha1","kind":"LaneRoute","metadata":{"name":"gray","namespace":"shop"},"spec":{"weight":20}}`
	if string(body) != want {
		t.Fatalf("%s", body)
	}
}

func TestHeadersOfTheUsersOwnAreForeign(t *testing.T) {
	lr := object(t, gray)
	if HasForeignHeaders(lr) {
		t.Fatal("no headers yet")
	}
	_ = unstructured.SetNestedSlice(lr.Object, []interface{}{map[string]interface{}{"name": "x-team", "value": "a"}},
		"spec", "match", "headers")
	if !HasForeignHeaders(lr) {
		t.Fatal("kubectl's headers are not the plugin's")
	}
	fields := lr.GetManagedFields()
	fields[1].FieldsV1.Raw = []byte(`{"f:spec":{"f:weight":{},"f:match":{"f:headers":{}}}}`)
	lr.SetManagedFields(fields)
	if HasForeignHeaders(lr) {
		t.Fatal("the plugin's own headers")
	}
	if s, _ := Owned(lr); len(s.Headers) != 1 || s.Headers[0] != (Header{"x-team", "a"}) {
		t.Fatalf("%+v", s)
	}
}

func TestHeaderRoutesMatchExactlyOrAreRefused(t *testing.T) {
	ok, err := Headers([]v1alpha1.HeaderRoutingMatch{{HeaderName: "x-canary", HeaderValue: &v1alpha1.StringMatch{Exact: "yes"}}})
	if err != nil || len(ok) != 1 || ok[0] != (Header{"x-canary", "yes"}) {
		t.Fatalf("%v %v", ok, err)
	}
	for _, v := range []*v1alpha1.StringMatch{nil, {Prefix: "y"}, {Regex: "y.*"}} {
		_, err := Headers([]v1alpha1.HeaderRoutingMatch{{HeaderName: "x-canary", HeaderValue: v}})
		if err == nil || !strings.Contains(err.Error(), `header "x-canary": a lane is entered by exact header values only`) {
			t.Fatalf("%+v: %v", v, err)
		}
	}
}

func TestTheWeightIsVerifiedOnceEveryEntryThatSplitsReportsItAccepted(t *testing.T) {
	lr := object(t, gray)
	entries := []unstructured.Unstructured{
		*object(t, entry("shop", "", 20)),
		*object(t, entry("mesh", `"mesh":{}`, 0)),
		*object(t, entry("tests", `"applyWeights":false`, 0)),
	}
	routes := map[string]*unstructured.Unstructured{"shop-0": route("shop-0", 4, 4, "True")}
	if got := RoutesToCheck(lr, entries); len(got) != 1 || got[0] != "shop-0" {
		t.Fatalf("routes to check: %v", got)
	}
	if why := Unverified(lr, entries, routes, 20); why != "" {
		t.Fatal(why)
	}
	cases := map[string]func(){
		"LaneRoute gray has weight 20": func() {},
		"laneway has not resolved generation 4 of LaneRoute gray": func() {
			lr.SetGeneration(4)
			_ = unstructured.SetNestedField(lr.Object, int64(50), "spec", "weight")
		},
		"LaneEntry shop reports weight 20 for lane gray": func() {
			_ = unstructured.SetNestedField(lr.Object, int64(4), "status", "observedGeneration")
		},
		"HTTPRoute shop-0 of LaneEntry shop: not accepted at generation 5 by traefik.io/gateway-controller": func() {
			entries[0] = *object(t, entry("shop", "", 50))
			routes["shop-0"] = route("shop-0", 5, 4, "True")
		},
		"HTTPRoute shop-0 of LaneEntry shop: not found": func() { delete(routes, "shop-0") },
	}
	for _, want := range []string{
		"LaneRoute gray has weight 20",
		"laneway has not resolved generation 4 of LaneRoute gray",
		"LaneEntry shop reports weight 20 for lane gray",
		"HTTPRoute shop-0 of LaneEntry shop: not accepted at generation 5 by traefik.io/gateway-controller",
		"HTTPRoute shop-0 of LaneEntry shop: not found",
	} {
		cases[want]()
		if why := Unverified(lr, entries, routes, 50); why != want {
			t.Fatalf("want %q, got %q", want, why)
		}
	}
	routes["shop-0"] = route("shop-0", 5, 5, "True")
	if why := Unverified(lr, entries, routes, 50); why != "" {
		t.Fatal(why)
	}
}

func TestTheLaneRouteComesFromThePluginConfig(t *testing.T) {
	ro := &v1alpha1.Rollout{}
	if _, err := LaneRouteName(ro); err == nil || err.Error() != `trafficRouting.plugins["laneway/laneroute"] is missing` {
		t.Fatal(err)
	}
	ro.Spec.Strategy.Canary = &v1alpha1.CanaryStrategy{TrafficRouting: &v1alpha1.RolloutTrafficRouting{
		Plugins: map[string]json.RawMessage{PluginName: json.RawMessage(`{}`)}}}
	if _, err := LaneRouteName(ro); err == nil || !strings.HasSuffix(err.Error(), ".laneRoute is required") {
		t.Fatal(err)
	}
	ro.Spec.Strategy.Canary.TrafficRouting.Plugins[PluginName] = json.RawMessage(`{"laneRoute":"gray"}`)
	if name, err := LaneRouteName(ro); name != "gray" || err != nil {
		t.Fatal(name, err)
	}
}
