-- /hello: the soak rewrites this file every 0.5 s (hot reload under load);
-- each version answers its own body.
return function(req, resp)
    resp.headers["X-Kind"] = "hello"
    resp:send("hello v0\n")
end
