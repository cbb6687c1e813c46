-- /redis?key=K&value=V: SET K V, then answers GET K (redis_spec.lua).
local mf = require "moonflow"

return function(req, resp)
    local r = mf.redis(os.getenv("MF_REDIS_URL"))
    assert(r:call("SET", req.query.key, req.query.value))
    local v, err = r:call("GET", req.query.key)
    if not v then
        resp.status = 502
        return resp:send(err)
    end
    resp:send(v)
end
