-- /fanout : two backend calls side by side; the worker serves other
-- requests while they run, and this coroutine waits once for both.
local mf = require "moonflow"

return function(req, resp)
    local base = "http://" .. (req.headers.host or "127.0.0.1:8080")
    local r = mf.parallel {
        mf.task.http { url = base .. "/hello", timeout = 1000 },
        mf.task.http { url = base .. "/json?from=fanout", timeout = 1000 },
    }:wait()
    resp:json {
        hello = { state = r[1].state, status = r[1].status, body = r[1].body },
        json = { state = r[2].state, status = r[2].status },
    }
end
