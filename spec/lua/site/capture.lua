-- Subrequests for capture_spec.lua: ?case= picks what this handler
-- captures; case=span is the subrequest that reports its own time span.
local mf = require "moonflow"

local cases = {}

function cases.span(req, resp)
    local t0 = mf.now()
    mf.sleep(tonumber(req.query.ms))
    resp:json { start = t0, stop = mf.now(), depth = req.subrequest }
end

function cases.multi(req, resp)
    local r = mf.capture_multi {
        { "/capture", { args = { case = "span", ms = 60 } } },
        { "/capture?case=span&ms=60" },
        { "/error" },
        { "/no-such-route" },
    }
    resp:json {
        a = mf.json.decode(r[1].body), b = mf.json.decode(r[2].body),
        statuses = { r[1].status, r[2].status, r[3].status, r[4].status },
    }
end

function cases.inherit(req, resp)
    local r = mf.capture("/echo?q=1", { method = "POST", headers = { ["X-Custom"] = "sub" } })
    resp:json { status = r.status, type = r.headers["Content-Type"], echo = mf.json.decode(r.body) }
end

-- Routes with phases captured: their filters apply to the answer.
function cases.filtered(_, resp)
    local out = {}
    for _, case in ipairs { "send", "write", "status" } do
        local r = mf.capture("/phases?case=" .. case .. "&key=sub-" .. case)
        out[case] = { status = r.status, filtered = r.headers["x-filtered"], body = r.body }
    end
    local r = mf.capture("/sub_filters")
    out.marks = { phase = r.headers["x-phase"], body = r.body }
    resp:json(out)
end

function cases.misuse(req, resp)
    local errors = {}
    for i, call in ipairs {
        function() mf.capture("no-slash") end,
        function() mf.capture("/ok", { nope = 1 }) end,
        function() mf.capture("/ok", { method = "get" }) end,
        function() mf.capture_multi("/ok") end,
    } do
        local ok, err = pcall(call)
        errors[i] = not ok and err or "no error"
    end
    resp:json(errors)
end

return function(req, resp)
    cases[req.query.case](req, resp)
end
