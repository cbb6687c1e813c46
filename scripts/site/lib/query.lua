-- lib/query.lua : a helper module, not a route (/lib/query answers 404).
-- Routes load it with require "query"; edit it while the server runs and
-- the routes that use it reload with it.
local M = {}

-- The query parameter name as a number within [min, max], or default.
function M.number(req, name, default, min, max)
    local n = tonumber(req.query[name])
    if not n then return default end
    return math.max(min, math.min(max, n))
end

return M
