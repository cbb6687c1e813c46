-- Response headers a handler gets wrong (serve_spec.lua):
--   /headers?case=raises   resp:set_header and resp:redirect with a bad name
--                          or value raise at once: answers what pcall saw
--   /headers?case=managed  resp.headers sets a header the server manages
--   /headers?case=ctl      resp.headers holds a control byte in a value
--   /headers?case=type     resp.headers holds a boolean value
--   /headers?case=name     resp.headers holds a name that is not a token
--   /headers?case=ret      as managed, but the handler returns without send
--   /headers?case=write    as ctl, but the handler streams: write fails
--   /headers?case=late     resp:set_header after the head was streamed
--   /headers?case=trim     a valid value with spaces around it
return function(req, resp)
    local case = req.query.case
    if case == "raises" then
        local seen = {}
        for _, args in ipairs {
            { "Content-Length ", "5" }, { "X\r\nY", "v" }, { "", "v" },
            { "X-Ok", "a\r\nb" }, { "X-Ok", "a\0b" }, { "X-Ok", true },
            { "X-Ok", { "a", "b\n" } },
        } do
            seen[#seen + 1] = tostring(pcall(resp.set_header, resp, args[1],
                                             args[2]))
        end
        seen[#seen + 1] = tostring(pcall(resp.redirect, resp,
                                         "/ok\r\nSet-Cookie: a=b"))
        resp:set_header("X-List", { "a", 2 }) -- valid: a string, a number
        resp:send(table.concat(seen, " "))
    elseif case == "managed" then
        resp.headers["Content-Length"] = "3"
        resp:send("abc")
    elseif case == "ctl" then
        resp.headers["X-Bad"] = "a\nb"
        resp:send("never sent")
    elseif case == "type" then
        resp.headers["X-Flag"] = true
        resp:send("never sent")
    elseif case == "name" then
        resp.headers["X Y"] = "v"
        resp:send("never sent")
    elseif case == "ret" then
        resp.headers["Transfer-Encoding"] = "chunked"
    elseif case == "write" then
        resp.headers["X-Bad"] = "\0"
        local ok, err = resp:write("never sent")
        assert(ok == nil and err == "closed")
        assert(resp.sent)
    elseif case == "late" then
        assert(resp:write("streamed"))
        local ok, err = pcall(resp.set_header, resp, "X-Late", "1")
        assert(not ok and err:match("already sent"), err)
    elseif case == "trim" then
        resp.headers["X-Trim"] = "  padded\t"
        resp:send("ok")
    end
end
