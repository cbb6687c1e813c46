-- /phase_abort?key=K&ms=N: a handler told when its client leaves:
-- ngx.on_abort's function records aborted:K at once, and the handler goes
-- on to its end (after:K) and its log phase (phases_spec.lua).
local mf = require "moonflow"
local ngx = require "moonflow.ngx"

local locks = mf.shared_dict("phase_locks", 1048576)

return {
    content = function(req, resp)
        local key = req.query.key
        assert(ngx.on_abort(function()
            locks:set("aborted:" .. key, mf.now())
        end))
        mf.sleep(tonumber(req.query.ms) or 300)
        locks:set("after:" .. key, mf.now())
        resp:send("done")
    end,
    log = function(req, resp)
        locks:set("log:" .. req.query.key, resp.status)
    end,
}
