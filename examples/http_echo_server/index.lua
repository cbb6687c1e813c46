-- An HTTP echo server as a `moonflow serve` site: this file answers `/`
-- with what the request carried, as text: the request line, each header
-- (name: value, sorted by name, as the server parsed them), the client's
-- address, and the body if there was one.
--
--   moonflow serve examples/http_echo_server --listen 127.0.0.1:8888
--   curl -d 'hi' 'http://127.0.0.1:8888/?a=1'
--
-- Other paths answer 404: a site's routes are its files.
return function(req, resp)
    local lines = { ("%s %s HTTP/%s"):format(req.method, req.uri, req.version) }
    local names = {}
    for name in pairs(req.headers) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
        local value = req.headers[name]
        if type(value) == "table" then value = table.concat(value, ", ") end
        lines[#lines + 1] = name .. ": " .. value
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "peer: " .. req.peer
    if req.body and #req.body > 0 then
        lines[#lines + 1] = ""
        lines[#lines + 1] = req.body
    end
    resp.headers["Content-Type"] = "text/plain"
    resp:send(table.concat(lines, "\n") .. "\n")
end
