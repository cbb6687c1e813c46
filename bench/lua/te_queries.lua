-- TechEmpower's multiple queries (GET /te_queries?queries=Q): Q random World
-- rows, read side by side, as a JSON array (bench/mysql/techempower.py).
local world = require "_world"

return function(req, resp)
    local rows, err = world.read_rows(world.db(), world.queries(req))
    if not rows then return world.fail(resp, err) end
    resp:json(rows)
end
