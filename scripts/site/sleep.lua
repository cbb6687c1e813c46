-- /sleep?ms=N : parks this request's coroutine on a timer task.
local mf = require "moonflow"
local query = require "query" -- lib/query.lua

return function(req, resp)
    local ms = query.number(req, "ms", 100, 0, 10000)
    local t0 = mf.now()
    mf.sleep(ms)
    resp:send(("slept %d ms\n"):format(mf.now() - t0))
end
