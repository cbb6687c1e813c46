-- /phase_state?key=K: what phase_lock, phases and phase_abort left under
-- K in the shared dict phase_locks (JSON; missing ones are absent).
local mf = require "moonflow"

local locks = mf.shared_dict("phase_locks", 1048576)

return function(req, resp)
    local k = req.query.key
    local out = {}
    for _, what in ipairs { "", "answer:", "log:", "order:", "aborted:", "after:", "timer:" } do
        out[what == "" and "lock" or what:sub(1, -2)] = locks:get(what .. k)
    end
    resp:json(out)
end
