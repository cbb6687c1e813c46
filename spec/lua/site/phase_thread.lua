-- /phase_thread?key=K: a route with phases whose threads are the request's.
-- The thread access spawns stores its phase under order:K; the one content
-- spawns outlives the answer, reads ngx.var after it, and the log phase
-- (which waits for it) stores what it left under after:K.
local mf = require "moonflow"
local ngx = require "moonflow.ngx"

local locks = mf.shared_dict("phase_locks", 1048576)

return {
    access = function(req)
        local key = req.query.key
        ngx.thread.spawn(function() locks:set("order:" .. key, ngx.get_phase()) end)
    end,
    content = function(_, resp)
        mf.spawn(function()
            mf.sleep(50)
            ngx.ctx.late = ngx.get_phase() .. ":" .. ngx.var.arg_key
        end)
        resp:send("answered")
    end,
    log = function(req)
        locks:set("after:" .. req.query.key, (ngx.ctx.late or "none") .. " log=" .. ngx.get_phase())
    end,
}
