-- TechEmpower's single query (GET /te_db): one random World row as JSON
-- (bench/mysql/techempower.py).
local world = require "_world"

return function(_, resp)
    local row, err = world.read_one(world.db())
    if not row then return world.fail(resp, err) end
    resp:json(row)
end
