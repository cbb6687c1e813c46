-- /redis_wait?what=call|sub&ms=N: waits N ms in r:call (BLPOP) or in
-- sub:next, for the leak check of aborted handlers (redis_spec.lua): the
-- route stops its handler when the client leaves (on_abort = "stop").
local mf = require "moonflow"

local function content(req, resp)
    local r = mf.redis(os.getenv("MF_REDIS_URL"))
    local ms = tonumber(req.query.ms) or 1000
    if req.query.what == "sub" then
        local sub = r:subscribe("serve:wait")
        sub:next(ms)
        sub:close()
    else
        r:call("BLPOP", "serve:wait", ms / 1000)
    end
    resp:send("waited")
end

return { content = content, on_abort = "stop" }
