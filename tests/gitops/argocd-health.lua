-- Argo CD health check for laneway.io/v1alpha1 LaneRoute, TagRule and LaneEntry.
-- Install it as resource.customizations.health.laneway.io_<Kind> in argocd-cm
-- (see charts/laneway/README.md). Argo CD runs it in gopher-lua (Lua 5.1) with
-- only the base, table and a reduced os library: no string library, so no
-- string.format and no ("..."):method() calls here.
--
--   no status, observedGeneration missing or < metadata.generation -> Progressing
--   Stalled=True     -> Degraded     (Stalled's message)
--   Reconciling=True -> Progressing  (Reconciling's message)
--   Ready=True       -> Healthy
--   Ready=False      -> Progressing  ("reason: message"; not stalled, so laneway
--                       expects it to pass, e.g. a lane's pods not ready yet: as kstatus)
--   Ready=Unknown or no Ready condition -> Progressing
-- A condition whose own observedGeneration is older than metadata.generation
-- is stale and ignored.
local hs = { status = "Progressing", message = "Waiting for laneway" }

local meta = obj.metadata or {}
-- Argo CD reports "Pending deletion" itself before calling this script; the
-- same here so the script gives that answer outside Argo CD too.
if meta.deletionTimestamp ~= nil then
  hs.message = "Pending deletion"
  return hs
end

local generation = tonumber(meta.generation)
local st = obj.status
if type(st) ~= "table" then
  return hs
end
local observed = tonumber(st.observedGeneration)
if observed == nil then
  hs.message = "Waiting for laneway: status has no observedGeneration"
  return hs
end
if generation ~= nil and observed < generation then
  hs.message = "Waiting for laneway to observe generation " .. tostring(generation)
    .. " (status is for generation " .. tostring(observed) .. ")"
  return hs
end

local conds, stale = {}, {}
if type(st.conditions) == "table" then
  for _, c in ipairs(st.conditions) do
    if type(c) == "table" and c.type ~= nil then
      local cgen = tonumber(c.observedGeneration)
      if generation ~= nil and cgen ~= nil and cgen < generation then
        stale[c.type] = cgen
      else
        conds[c.type] = c
      end
    end
  end
end

-- message, else reason, else fallback
local function say(c, fallback)
  if c.message ~= nil and c.message ~= "" then return c.message end
  if c.reason ~= nil and c.reason ~= "" then return c.reason end
  return fallback
end

local c = conds["Stalled"]
if c ~= nil and c.status == "True" then
  hs.status = "Degraded"
  hs.message = say(c, "Stalled")
  return hs
end

c = conds["Reconciling"]
if c ~= nil and c.status == "True" then
  hs.message = say(c, "Reconciling")
  return hs
end

c = conds["Ready"]
if c == nil then
  if stale["Ready"] ~= nil then
    hs.message = "Waiting for laneway: Ready is for generation " .. tostring(stale["Ready"])
  else
    hs.message = "Waiting for laneway: no Ready condition"
  end
  return hs
end
if c.status == "True" then
  hs.status = "Healthy"
  hs.message = say(c, "Ready")
  return hs
end
if c.status == "False" then
  if c.reason ~= nil and c.reason ~= "" and c.message ~= nil and c.message ~= "" then
    hs.message = c.reason .. ": " .. c.message
  else
    hs.message = say(c, "Not ready")
  end
  return hs
end
-- Ready=Unknown (or anything else): not decided yet
hs.message = say(c, "Ready is " .. tostring(c.status))
return hs
