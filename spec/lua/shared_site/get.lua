-- GET /get?dict=D&key=K[&set=V]: sets K to V first when given; answers the
-- value (tostring), or the dict's answer.
local mf = require "moonflow"

return function(req, resp)
    local d = mf.shared[req.query.dict]
    if not d then return resp:send("no dict") end
    if req.query.set then assert(d:set(req.query.key, req.query.set)) end
    local v, err = d:get(req.query.key)
    resp:send(tostring(v) .. (err and " " .. err or ""))
end
