-- mf.graph in a handler: b and c after a, d after both (serve_spec.lua).
local mf = require "moonflow"

local function value(v) return mf.task.lua(function() mf.sleep(2) return v end) end

return function(req, resp)
    local r = mf.graph {
        a = value("a"),
        b = { value("b"), after = "a" },
        c = { mf.task.lua(function() error("c fails") end), after = "a" },
        d = { value("d"), after = { "b", "c" } },
    }:wait()
    resp:json { a = r.a.values[1], b = r.b.values[1], c = r.c.state, d = r.d.error }
end
