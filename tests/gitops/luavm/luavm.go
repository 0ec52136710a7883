// Package luavm holds what the GitOps tools' Lua runners share: opening a chosen
// set of gopher-lua's libraries and turning decoded JSON into Lua values.
package luavm

import (
	lua "github.com/yuin/gopher-lua"
)

// Open opens the libraries named in libs (name → opener), and only those.
func Open(l *lua.LState, libs map[string]lua.LGFunction) error {
	for name, open := range libs {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(open), Protect: true}, lua.LString(name)); err != nil {
			return err
		}
	}
	return nil
}

// ToLua converts a decoded JSON value into Lua values the way Argo CD and
// Kruise Rollout do (objects and arrays become tables, all numbers LNumber,
// null nil).
func ToLua(l *lua.LState, v interface{}) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case []interface{}:
		t := l.CreateTable(len(v), 0)
		for _, x := range v {
			t.Append(ToLua(l, x))
		}
		return t
	case map[string]interface{}:
		t := l.CreateTable(0, len(v))
		for k, x := range v {
			t.RawSetH(lua.LString(k), ToLua(l, x))
		}
		return t
	}
	return lua.LNil
}
