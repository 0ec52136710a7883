-- OpenKruise Rollout traffic routing for a LaneRoute (trafficRoutings[].customNetworkRefs):
-- a step's traffic becomes the lane's weight, its header matches the headers that enter the
-- lane. Kruise passes the LaneRoute's spec as it was before the rollout and puts it back when
-- the rollout ends, so every step starts from the original and nothing is left behind.
local spec = obj.data.spec
local matches = obj.matches or {}
if #matches > 1 then
  error("LaneRoute accepts one match per step: its headers must all be present to enter the lane")
end
if #matches == 1 then
  -- Kruise: matches take precedence over traffic.
  local m = matches[1]
  if m.path ~= nil or (m.queryParams ~= nil and #m.queryParams > 0) then
    error("LaneRoute matches headers only, not a path or query parameters")
  end
  local headers = {}
  for _, h in ipairs(m.headers or {}) do
    if h.type ~= nil and h.type ~= "Exact" then
      error("LaneRoute matches header values exactly; " .. h.name .. " asks for " .. h.type)
    end
    table.insert(headers, {name = h.name, value = h.value})
  end
  if #headers == 0 then
    error("LaneRoute needs at least one header in a step's match")
  end
  spec.match = {headers = headers}
elseif obj.canaryWeight >= 0 then
  spec.weight = obj.canaryWeight
end
return obj.data
