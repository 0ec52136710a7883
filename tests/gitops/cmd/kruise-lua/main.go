// Command kruise-lua does to an object what OpenKruise Rollout's custom network
// provider (trafficRoutings[].customNetworkRefs) does to it, so that a traffic
// routing Lua script can be tried on the objects a live API server serves:
//
//	kruise-lua store OBJ.json         # before the first step: keep the original
//	kruise-lua step -script S.lua [-weight N] [-matches JSON] OBJ.json
//	kruise-lua restore OBJ.json       # when the rollout ends
//
// Each prints the object Kruise would then update. `step` runs the script on the
// original kept by `store`, in gopher-lua with the math, base, table and string
// libraries, the same global `obj` (data.{spec,labels,annotations}, canaryWeight
// (-1 for a step without traffic), stableWeight, matches, canaryService,
// stableService) and a 1 s timeout, and reads its returned table the same way
// (an empty table reads as null). Exit status 1 when the script fails: Kruise
// then shows the error in the Rollout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	lua "github.com/yuin/gopher-lua"

	"laneway.io/gitops/luavm"
)

const original = "rollouts.kruise.io/original-spec-configuration"

// data is Kruise's customNetworkProvider.Data.
type data struct {
	Spec        interface{}       `json:"spec,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func main() {
	if len(os.Args) < 2 {
		fail(2, "usage: kruise-lua store|step|restore ... OBJ.json")
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	script := flags.String("script", "", "the traffic routing script")
	weight := flags.Int("weight", -1, "the step's traffic (percent); -1 for none")
	matches := flags.String("matches", "null", "the step's matches (JSON)")
	_ = flags.Parse(os.Args[2:])
	if flags.NArg() != 1 {
		fail(2, "kruise-lua: one object file")
	}
	raw, err := os.ReadFile(flags.Arg(0))
	if err != nil {
		fail(2, err.Error())
	}
	var obj map[string]interface{}
	if err := json.Unmarshal(raw, &obj); err != nil {
		fail(2, err.Error())
	}
	meta := obj["metadata"].(map[string]interface{})
	switch os.Args[1] {
	case "store":
		store(obj, meta)
	case "step":
		if err := step(obj, meta, *script, *weight, *matches); err != nil {
			fail(1, err.Error())
		}
	case "restore":
		restore(obj, meta)
	default:
		fail(2, "kruise-lua: store, step or restore")
	}
	out, _ := json.Marshal(obj)
	fmt.Println(string(out))
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}

func strings(v interface{}) map[string]string {
	out := map[string]string{}
	m, _ := v.(map[string]interface{})
	for k, x := range m {
		out[k], _ = x.(string)
	}
	return out
}

func store(obj, meta map[string]interface{}) {
	annotations := strings(meta["annotations"])
	delete(annotations, original)
	kept, _ := json.Marshal(data{Spec: obj["spec"], Labels: strings(meta["labels"]), Annotations: annotations})
	annotations[original] = string(kept)
	meta["annotations"] = annotations
}

func restore(obj, meta map[string]interface{}) {
	var kept data
	_ = json.Unmarshal([]byte(strings(meta["annotations"])[original]), &kept)
	obj["spec"] = kept.Spec
	meta["annotations"] = kept.Annotations
	meta["labels"] = kept.Labels
}

func step(obj, meta map[string]interface{}, script string, weight int, matches string) error {
	code, err := os.ReadFile(script)
	if err != nil {
		return err
	}
	keptJSON := strings(meta["annotations"])[original]
	if keptJSON == "" {
		return fmt.Errorf("no %s annotation: store the object first", original)
	}
	var kept, ms interface{}
	_ = json.Unmarshal([]byte(keptJSON), &kept)
	if err := json.Unmarshal([]byte(matches), &ms); err != nil {
		return fmt.Errorf("matches: %v", err)
	}
	input := map[string]interface{}{
		"data": kept, "canaryWeight": float64(weight), "stableWeight": float64(100 - weight),
		"matches": ms, "canaryService": "", "stableService": "",
	}
	out, err := run(string(code), input)
	if err != nil {
		return err
	}
	var next data
	if err := json.Unmarshal(out, &next); err != nil {
		return err
	}
	annotations := next.Annotations
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[original] = keptJSON
	obj["spec"] = next.Spec
	meta["annotations"] = annotations
	meta["labels"] = next.Labels
	return nil
}

func run(code string, input map[string]interface{}) ([]byte, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	if err := luavm.Open(l, map[string]lua.LGFunction{
		lua.MathLibName: lua.OpenMath, lua.BaseLibName: lua.OpenBase,
		lua.TabLibName: lua.OpenTable, lua.StringLibName: lua.OpenString,
	}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luavm.ToLua(l, input))
	if err := l.DoString(code); err != nil {
		return nil, err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	return json.Marshal(luaJSON{ret})
}

// luaJSON encodes a Lua value as Kruise's luamanager.Encode does: an empty
// table is null, a table with keys 1..n an array, one with string keys an object.
type luaJSON struct{ lua.LValue }

func (j luaJSON) MarshalJSON() ([]byte, error) {
	switch v := j.LValue.(type) {
	case lua.LBool:
		return json.Marshal(bool(v))
	case lua.LNumber:
		return json.Marshal(float64(v))
	case lua.LString:
		return json.Marshal(string(v))
	case *lua.LTable:
		key, _ := v.Next(lua.LNil)
		switch key.Type() {
		case lua.LTNil:
			return []byte("null"), nil
		case lua.LTNumber:
			arr := []luaJSON{}
			for i := 1; i <= v.Len(); i++ {
				arr = append(arr, luaJSON{v.RawGetInt(i)})
			}
			return json.Marshal(arr)
		default:
			obj := map[string]luaJSON{}
			v.ForEach(func(k, x lua.LValue) { obj[k.String()] = luaJSON{x} })
			return json.Marshal(obj)
		}
	}
	return []byte("null"), nil
}
