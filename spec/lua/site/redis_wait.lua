-- /redis_wait?what=call|sub|session|session_call&ms=N: waits N ms in
-- r:call (BLPOP), in sub:next, or inside r:session after a WATCH, in
-- mf.sleep or in s:call (BLPOP), for the leak check of aborted handlers
-- (redis_spec.lua): the route stops its handler when the client leaves
-- (on_abort = "stop"). The sessions' client has one connection: one that
-- an aborted handler kept would stop every later session.
local mf = require "moonflow"

local function content(req, resp)
    local r = mf.redis(os.getenv("MF_REDIS_URL"))
    local ms = tonumber(req.query.ms) or 1000
    local what = req.query.what
    if what == "session" or what == "session_call" then
        local one = mf.redis(os.getenv("MF_REDIS_URL"), { max_connections = 1 })
        one:session(function(s)
            s:call("WATCH", "serve:wait:s")
            if what == "session" then
                mf.sleep(ms)
            else
                s:call("BLPOP", "serve:wait", ms / 1000)
            end
        end)
    elseif what == "sub" then
        local sub = r:subscribe("serve:wait")
        sub:next(ms)
        sub:close()
    else
        r:call("BLPOP", "serve:wait", ms / 1000)
    end
    resp:send("waited")
end

return { content = content, on_abort = "stop" }
