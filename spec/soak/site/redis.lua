-- /redis: SET then GET on the worker's pipelined connection.
local mf = require "moonflow"
local redis = mf.redis(os.getenv("SOAK_REDIS_URL"))

return function(req, resp)
    resp.headers["X-Kind"] = "redis"
    assert(redis:call("SET", "soak:key", "value"))
    local v, err = redis:call("GET", "soak:key")
    if v ~= "value" then
        resp.status = 502
        return resp:send(tostring(err))
    end
    resp:send(v)
end
