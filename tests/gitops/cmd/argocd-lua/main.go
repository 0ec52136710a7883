// Command argocd-lua runs an Argo CD Lua health check the way the Argo CD
// application controller does: in gopher-lua (Argo CD's Lua VM), with only the
// package, base and table libraries and a reduced os library opened, the
// live object in the global `obj`, a 1 s timeout, and the same handling of
// objects being deleted and of invalid statuses.
//
//	argocd-lua -script argocd-health.lua OBJ.json...
//
// Prints "STATUS<TAB>MESSAGE" per object. Exit status 1 when a script fails
// (Argo CD then shows the resource as Unknown with the error).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"laneway.io/gitops/luavm"
)

var valid = map[string]bool{"Healthy": true, "Progressing": true, "Degraded": true,
	"Suspended": true, "Missing": true, "Unknown": true}

func main() {
	script := flag.String("script", "argocd-health.lua", "the health check")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: argocd-lua -script SCRIPT.lua OBJ.json...")
		os.Exit(2)
	}
	code, err := os.ReadFile(*script)
	if err != nil {
		fmt.Fprintln(os.Stderr, "argocd-lua:", err)
		os.Exit(2)
	}
	failed := false
	for _, f := range flag.Args() {
		data, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "argocd-lua:", err)
			os.Exit(2)
		}
		// Same decoder as the objects Argo CD caches (integers are int64).
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			fmt.Fprintf(os.Stderr, "argocd-lua: %s: %v\n", f, err)
			os.Exit(2)
		}
		st, msg, err := health(u, string(code))
		if err != nil {
			st, msg, failed = "Unknown", err.Error(), true
		}
		fmt.Printf("%s\t%s\n", st, strings.NewReplacer("\t", " ", "\n", " ").Replace(msg))
	}
	if failed {
		os.Exit(1)
	}
}

func health(u *unstructured.Unstructured, code string) (string, string, error) {
	// gitops-engine answers for objects being deleted before any script runs.
	if u.GetDeletionTimestamp() != nil {
		return "Progressing", "Pending deletion", nil
	}
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	if err := luavm.Open(l, map[string]lua.LGFunction{
		lua.LoadLibName: lua.OpenPackage, lua.BaseLibName: lua.OpenBase,
		lua.TabLibName: lua.OpenTable, lua.OsLibName: lua.OpenOs,
	}); err != nil {
		return "", "", err
	}
	// Keep only the harmless part of os, as Argo CD's "safe os" does.
	if osTable, ok := l.GetGlobal(lua.OsLibName).(*lua.LTable); ok {
		keep := map[string]bool{"clock": true, "date": true, "difftime": true, "time": true}
		var drop []lua.LValue
		osTable.ForEach(func(k, _ lua.LValue) {
			if !keep[k.String()] {
				drop = append(drop, k)
			}
		})
		for _, k := range drop {
			osTable.RawSet(k, lua.LNil)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luavm.ToLua(l, u.Object))
	if err := l.DoString(code); err != nil {
		return "", "", err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("expect table output from Lua script, not %s", l.Get(-1).Type())
	}
	status, msg := ret.RawGetString("status"), ret.RawGetString("message")
	if msg != lua.LNil && msg.Type() != lua.LTString {
		return "", "", fmt.Errorf("hs.message is a %s, not a string", msg.Type())
	}
	if status.Type() != lua.LTString || !valid[status.String()] {
		return "Unknown", "Lua returned an invalid health status", nil
	}
	m := ""
	if msg != lua.LNil {
		m = msg.String()
	}
	return status.String(), m, nil
}
