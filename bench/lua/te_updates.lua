-- TechEmpower's updates (GET /te_updates?queries=Q): Q random World rows read
-- side by side, each given a new random number, written side by side; the
-- rows as updated, as a JSON array (bench/mysql/techempower.py).
local world = require "_world"

return function(req, resp)
    local db = world.db()
    local rows, err = world.read_rows(db, world.queries(req))
    if rows then rows, err = world.update_rows(db, rows) end
    if not rows then return world.fail(resp, err) end
    resp:json(rows)
end
