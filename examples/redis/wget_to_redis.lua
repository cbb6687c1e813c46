-- A read-through cache in front of any URL, as a `moonflow serve` handler:
--
--   REDIS_URL=redis://127.0.0.1:6379/0 CACHE_TTL=60 moonflow serve examples/redis
--   curl -i 'http://127.0.0.1:8080/wget_to_redis?url=http://example.com/'
--
-- The first request for a URL fetches it with mf.http.get and keeps the body
-- in Redis for CACHE_TTL seconds (SET key body EX ttl); later requests are
-- answered from Redis. X-Cache says which: "miss", "hit", or "bypass" when
-- Redis cannot be used (the URL is then fetched every time). Only 200
-- answers are cached; others pass through with their status.
local mf = require "moonflow"

local redis_url = os.getenv("REDIS_URL") or "redis://127.0.0.1:6379/0"
local ttl = tonumber(os.getenv("CACHE_TTL")) or 60

return function(req, resp)
    local url = req.query.url
    if type(url) ~= "string" or not url:match("^https?://") then
        resp.status = 400
        return resp:send("usage: /wget_to_redis?url=http://...\n")
    end
    local r = mf.redis(redis_url)
    local key = "wget_to_redis:" .. url
    local cached, err = r:call("GET", key)
    if type(cached) == "string" then
        resp.headers["X-Cache"] = "hit"
        return resp:send(cached)
    end
    local res, ferr = mf.http.get(url, { timeout = 10000, redirects = 3 })
    if not res then
        resp.status = 502
        return resp:send("fetch failed: " .. ferr .. "\n")
    end
    local state = cached == nil and "bypass" or "miss" -- nil: Redis failed
    if state == "miss" and res.status == 200 then
        -- Stored before answering, so the next request finds it.
        local ok, serr = r:call("SET", key, res.body, "EX", ttl)
        if not ok then
            state, err = "bypass", serr
        end
    end
    if state == "bypass" then
        io.stderr:write("wget_to_redis: redis: ", tostring(err), "\n")
    end
    resp.status = res.status
    resp.headers["X-Cache"] = state
    resp:send(res.body)
end
