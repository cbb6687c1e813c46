-- /phase_stop?key=K&ms=N: on_abort = "stop": the handler ends when its
-- client leaves (no after:K), its log phase still runs (phases_spec.lua).
local mf = require "moonflow"

local locks = mf.shared_dict("phase_locks", 1048576)

return {
    content = function(req, resp)
        mf.sleep(tonumber(req.query.ms) or 300)
        locks:set("after:" .. req.query.key, "yes")
        resp:send("done")
    end,
    log = function(req, resp)
        locks:set("log:" .. req.query.key, resp.status)
    end,
    on_abort = "stop",
}
