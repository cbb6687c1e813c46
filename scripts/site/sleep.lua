-- /sleep?ms=N : parks this request's coroutine on a timer task.
local mf = require "moonflow"

return function(req, resp)
    local ms = tonumber(req.query.ms) or 100
    local t0 = mf.now()
    mf.sleep(ms)
    resp:send(("slept %d ms\n"):format(mf.now() - t0))
end
