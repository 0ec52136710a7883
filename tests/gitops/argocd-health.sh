#!/usr/bin/env bash
# Run the Argo CD health check (argocd-health.lua, or $ARGOCD_HEALTH_LUA) on an
# object read from a JSON file ("-" = stdin), the way Argo CD does, and print
#   STATUS<TAB>MESSAGE
# with STATUS one of Healthy, Progressing, Degraded, Suspended, Missing, Unknown.
#
# Like Argo CD's gopher-lua VM it uses Lua 5.1 (Debian's lua5.1), puts the
# object in the global `obj`, and gives the script only the base, table and a
# reduced os library (no string, io, debug, or string methods). Like gitops-engine,
# an object with metadata.deletionTimestamp is "Progressing  Pending deletion"
# without running the script, and a status outside the valid set becomes
# "Unknown  Lua returned an invalid health status".
#
# JSON is decoded with dkjson (Debian: lua-dkjson) when installed, otherwise
# python3 turns it into a Lua table literal; LANEWAY_LUA_JSON=python forces
# the latter. Needs: apt-get install lua5.1 [lua-dkjson]
# Exit status: 0 for any verdict, 1 when the script fails (a Lua error, which
# Argo CD shows as Unknown with the error), 2 on usage or setup errors.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
script=${ARGOCD_HEALTH_LUA:-$here/argocd-health.lua}
[ $# -eq 1 ] || { echo "usage: argocd-health.sh OBJECT.json" >&2; exit 2; }
lua=$(command -v lua5.1 || true)
[ -n "$lua" ] || { echo "argocd-health.sh: lua5.1 not found (apt-get install lua5.1 lua-dkjson)" >&2; exit 2; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
cat -- "$1" >"$tmp"

decoder=dkjson
if [ "${LANEWAY_LUA_JSON:-}" = python ] || ! "$lua" -e 'require "dkjson"' 2>/dev/null; then
  decoder=python
  python3 -c '
import json, sys

def lit(v):
    if v is None:
        return "nil"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        out = []
        for b in v.encode("utf-8"):
            c = chr(b)
            out.append(c if 32 <= b < 127 and c not in "\"\\" else "\\%03d" % b)
        return "\"" + "".join(out) + "\""
    if isinstance(v, list):
        return "{" + ", ".join(lit(x) for x in v) + "}"
    return "{" + ", ".join("[%s] = %s" % (lit(k), lit(x)) for k, x in v.items() if x is not None) + "}"

with open(sys.argv[1]) as f:
    v = json.load(f)
with open(sys.argv[1], "w") as f:
    f.write("return " + lit(v))
' "$tmp"
fi

"$lua" - "$script" "$decoder" "$tmp" <<'LUA'
local script_path, decoder, obj_path = arg[1], arg[2], arg[3]
local fh = assert(io.open(obj_path, "rb"))
local src = fh:read("*a")
fh:close()

local obj, err
if decoder == "dkjson" then
  local json = require("dkjson")
  local pos
  obj, pos, err = json.decode(src, 1, nil)
  -- dkjson tags decoded tables with metatables; Argo CD hands plain tables.
  local function plain(t)
    if type(t) ~= "table" then return t end
    setmetatable(t, nil)
    for k, v in pairs(t) do t[k] = plain(v) end
    return t
  end
  obj = plain(obj)
else
  local chunk
  chunk, err = loadstring(src, "=object")
  if chunk then obj = setfenv(chunk, {})() end
end
if type(obj) ~= "table" then
  io.stderr:write("argocd-health.sh: cannot decode the object: " .. tostring(err) .. "\n")
  os.exit(2)
end

local function out(status, message)
  message = (tostring(message or "")):gsub("[\t\n]", " ")
  io.write(status, "\t", message, "\n")
end

if type(obj.metadata) == "table" and obj.metadata.deletionTimestamp ~= nil then
  out("Progressing", "Pending deletion")
  os.exit(0)
end

local f = assert(io.open(script_path, "r"))
local code = f:read("*a")
f:close()
local chunk, cerr = loadstring(code, "=" .. script_path)
if not chunk then
  out("Unknown", cerr)
  os.exit(1)
end

-- What Argo CD's VM offers: base (minus file loaders), table, a safe os.
local env = {
  assert = assert, error = error, ipairs = ipairs, next = next, pairs = pairs,
  pcall = pcall, xpcall = xpcall, print = print, select = select,
  tonumber = tonumber, tostring = tostring, type = type, unpack = unpack,
  rawequal = rawequal, rawget = rawget, rawset = rawset,
  getmetatable = getmetatable, setmetatable = setmetatable, _VERSION = _VERSION,
  table = { concat = table.concat, insert = table.insert, maxn = table.maxn,
            remove = table.remove, sort = table.sort, getn = table.getn },
  os = { clock = os.clock, date = os.date, difftime = os.difftime, time = os.time },
  obj = obj,
}
env._G = env
setfenv(chunk, env)

-- No string library: ("x"):upper() must fail as it does in Argo CD.
local string_mt = getmetatable("")
local string_index = string_mt.__index
string_mt.__index = nil
-- A runaway loop would hit Argo CD's 1 s timeout; stop it here too.
debug.sethook(function() error("script ran too long", 2) end, "", 1e8)
local ok, hs = pcall(chunk)
debug.sethook()
string_mt.__index = string_index

if not ok then
  out("Unknown", hs)
  os.exit(1)
end
if type(hs) ~= "table" then
  out("Unknown", "expect table output from Lua script, not " .. type(hs))
  os.exit(1)
end
local valid = { Healthy = true, Progressing = true, Degraded = true,
                Suspended = true, Missing = true, Unknown = true }
if not valid[hs.status] then
  out("Unknown", "Lua returned an invalid health status")
  os.exit(0)
end
out(hs.status, hs.message)
LUA
