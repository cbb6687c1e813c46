-- Methods called on something that is not the response raise an error.
return function(req, resp)
    local ok, err = pcall(resp.send, {}, "x")
    local ok2, err2 = pcall(req.header, resp, "host")
    resp:send(tostring(ok) .. " " .. err .. "\n" .. tostring(ok2) .. " " .. err2)
end
