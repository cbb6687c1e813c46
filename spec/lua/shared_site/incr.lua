-- GET /incr?key=K&n=N: N incr of K in mf.shared.hits in one request;
-- answers "TAG VALUE" (the worker's tag, the value after the last incr).
local mf = require "moonflow"
local state = require "state"

return function(req, resp)
    local d = mf.shared.hits
    local key, n = req.query.key, tonumber(req.query.n)
    local v
    for _ = 1, n do
        v = d:incr(key, 1, 0)
    end
    resp:send(state.tag .. " " .. tostring(v))
end
