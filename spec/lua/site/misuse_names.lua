-- Each method of req and resp called with an argument of the wrong type (and
-- with something else than its object): the messages it raised, by method,
-- for serve_spec.lua to check that each names the method as written.
local calls = {
    { "req:header", function(req) return req:header(true) end },
    { "req:header", function(req) return req.header({}, "host") end },
    { "req:form", function(req) return req:form(true) end },
    { "resp:send", function(_, resp) return resp:send(true) end },
    { "resp:send", function(_, resp) return resp.send({}, "x") end },
    { "resp:write", function(_, resp) return resp:write(true) end },
    { "resp:redirect", function(_, resp) return resp:redirect(true) end },
    { "resp:redirect", function(_, resp) return resp:redirect("/ok", "x") end },
    { "resp:json", function(_, resp) return resp:json({}, "x") end },
    { "resp:set_header", function(_, resp) return resp:set_header(true, "x") end },
    { "resp:set_header", function(_, resp) return resp:set_header("x-a", true) end },
    { "resp:set_cookie", function(_, resp) return resp:set_cookie(true, "x") end },
    { "resp:set_cookie", function(_, resp) return resp:set_cookie("a", "b", true) end },
}

return function(req, resp)
    local out = {}
    for _, c in ipairs(calls) do
        local ok, err = pcall(c[2], req, resp)
        out[#out + 1] = { name = c[1], raised = not ok, err = tostring(err) }
    end
    resp:json(out)
end
