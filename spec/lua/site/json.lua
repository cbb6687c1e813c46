-- resp:json (serve_spec.lua):
--   /json                 a document, 200, Content-Type: application/json
--   /json?case=status     the status argument (201)
--   /json?case=type       a Content-Type of the handler's own is kept
--   /json?case=bad        a value JSON cannot carry: the handler raises (500)
--   /json?case=late       resp:json once a stream began raises: streams
--                         what pcall saw
--   /json?case=badstatus  a status out of range raises: answers what pcall saw
return function(req, resp)
    local case = req.query.case
    local doc = { n = 42, list = { 1, 2.5, "three", require("moonflow").null }, s = "a\"b\n" }
    if case == "status" then
        resp:json(doc, 201)
    elseif case == "type" then
        resp.headers["Content-Type"] = "application/problem+json"
        resp:json({ title = "nope" }, 409)
    elseif case == "bad" then
        resp:json { f = print }
    elseif case == "late" then
        assert(resp:write("streamed "))
        local ok, err = pcall(resp.json, resp, { late = true })
        assert(resp:write(tostring(ok) .. " " .. tostring(err)))
    elseif case == "badstatus" then
        local ok, err = pcall(resp.json, resp, {}, 42)
        resp:send(tostring(ok) .. " " .. tostring(err))
    else
        resp:json(doc)
    end
end
