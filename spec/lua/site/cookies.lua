-- req.cookies and resp:set_cookie (serve_spec.lua):
--   /cookies            echoes req.cookies as JSON and sets two cookies
--   /cookies?case=bad   resp:set_cookie with a bad value raises: answers
--                       what pcall saw
return function(req, resp)
    if req.query.case == "bad" then
        local ok, err = pcall(resp.set_cookie, resp, "a", "has space")
        return resp:send(tostring(ok) .. " " .. err)
    end
    resp:set_cookie("session", "abc123", { path = "/", httponly = true,
                                           samesite = "Lax", max_age = 3600 })
    resp:set_cookie("theme", "dark")
    resp:json(req.cookies)
end
