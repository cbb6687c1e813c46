-- /thread_req?x=V: a plain handler whose threads (ngx.thread.spawn and
-- mf.spawn) are the request's: they read it through ngx.* and the req
-- they were given, see its ngx.ctx and phase, and write part of its answer.
local mf = require "moonflow"
local ngx = require "moonflow.ngx"

return function(req)
    ngx.ctx.mark = "handler's"
    local t = ngx.thread.spawn(function()
        ngx.say("thread phase=", ngx.get_phase(), " x=", ngx.var.arg_x, " method=",
                ngx.req.get_method(), " ctx=", ngx.ctx.mark, " req=", req.query.x)
        return "done"
    end)
    local ok, v = ngx.thread.wait(t)
    local inner = mf.spawn(function()
        return mf.spawn(function() return ngx.get_phase() .. " " .. ngx.var.uri end):wait()
    end)
    local _, _, nested = inner:wait()
    ngx.say("handler ", tostring(ok), " ", tostring(v), " nested=", tostring(nested))
end
