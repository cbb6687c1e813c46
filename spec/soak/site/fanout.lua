-- /fanout: an HTTP call back to this server and a Redis command side by
-- side; anything but two successes answers 502 (an unexpected kind).
local mf = require "moonflow"
local redis = mf.redis(os.getenv("SOAK_REDIS_URL"))

return function(req, resp)
    local r = mf.parallel {
        mf.task.http { url = "http://" .. req.headers.host .. "/hello",
                       timeout = 5000 },
        mf.task.redis(redis, "INCR", "soak:fanout"),
    }:wait()
    resp.headers["X-Kind"] = "fanout"
    if r[1].status ~= 200 or type(r[2].value) ~= "number" then
        resp.status = 502
        return resp:send(tostring(r[1].error or r[2].error))
    end
    resp:send(r[1].body)
end
