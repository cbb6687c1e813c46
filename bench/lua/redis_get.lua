-- The Redis handler of bench/ (GET /redis_get): one GET of key "k" from the
-- redis-server at MF_BENCH_REDIS (a redis:// URL), its value as the body.
-- mf.redis(url) is looked up per request, as the peer nginx + lua-resty-redis
-- connects (from its keep-alive pool) per request; the client is the
-- worker's own, so the lookup finds the same one every time.
local mf = require "moonflow"

local url = os.getenv("MF_BENCH_REDIS") or "redis://127.0.0.1:6379/0"

return function(req, resp)
    local v, err = mf.redis(url):call("GET", "k")
    if type(v) ~= "string" then
        resp.status = 502
        return resp:send("redis: " .. tostring(err or "no value") .. "\n")
    end
    resp:send(v)
end
